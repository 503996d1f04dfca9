//! Every MPA wire parser (RFC 5044 §4-§7, RFC 6581 §6/§9) on arbitrary bytes: the Request/Reply
//! frame view and Repr, the enhanced connection data, the FPDU view and Repr, the marker. Parsing
//! never panics, and whatever parses re-emits to bytes that parse to the same Repr.
#![no_main]
use dpwarp::wire::fpdu::{Fpdu, FpduRepr, Marker, MarkerRepr};
use dpwarp::wire::mpa::{EnhancedData, Frame, FrameRepr};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(f) = Frame::new_checked(data) {
        let _ = (f.kind(), f.markers(), f.crc(), f.rejected(), f.enhanced(), f.rev());
        let _ = (f.pd_length(), f.private_data().len(), f.total_len());
        if let Ok(repr) = FrameRepr::parse(&f) {
            let mut out = Vec::new();
            repr.emit_to_vec(&mut out);
            let again = FrameRepr::parse(&Frame::new_checked(&out[..]).expect("emitted frame"))
                .expect("emitted frame parses");
            assert_eq!(again, repr);
        }
    }
    if let Ok(e) = EnhancedData::parse(data) {
        let mut out = [0u8; 4];
        e.emit(&mut out);
        assert_eq!(EnhancedData::parse(&out).expect("emitted enhanced data"), e);
    }
    if let Ok(f) = Fpdu::new_checked(data) {
        if let Ok(repr) = FpduRepr::parse(&f) {
            let mut out = vec![0u8; repr.buffer_len()];
            repr.emit(&mut Fpdu::new_unchecked(&mut out[..]));
            // `emit` writes the correct CRC32c whatever the parsed field held.
            let back = Fpdu::new_checked(&out[..]).expect("emitted FPDU");
            assert_eq!(FpduRepr::parse(&back).expect("emitted FPDU parses").ulpdu, repr.ulpdu);
            assert!(back.verify_crc(), "emitted FPDU has a bad CRC");
        }
    }
    if let Ok(m) = Marker::new_checked(data) {
        if let Ok(repr) = MarkerRepr::parse(&m) {
            let mut out = [0u8; 4];
            repr.emit(&mut Marker::new_unchecked(&mut out[..]));
            let back = Marker::new_checked(&out[..]).expect("emitted marker");
            assert_eq!(MarkerRepr::parse(&back).expect("emitted marker parses"), repr);
        }
    }
});
