//! The RPC-over-RDMA header parser (draft-ietf-nfsv4-rpcrdma-01 §4.2, RFC 8166 §5) on arbitrary
//! bytes: never panics, bounded allocation, and whatever parses re-emits to the same header and
//! length.
#![no_main]
use dpwarp::wire::rpcrdma::{HeaderError, HeaderRepr, MAX_SEGMENTS};
use dpwarp::wire::xdr::XdrWriter;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match HeaderRepr::parse(data) {
        Ok((h, n)) => {
            assert!(n <= data.len());
            assert!(h.segment_count() <= MAX_SEGMENTS);
            let mut w = XdrWriter::new();
            h.emit(&mut w);
            assert_eq!(w.len(), n);
            assert_eq!(HeaderRepr::parse(w.as_slice()).expect("re-parse").0, h);
        }
        Err(HeaderError::Short) => assert!(data.len() < 16),
        Err(_) => {}
    }
});
