//! Every DDP/RDMAP wire parser (RFC 5041 §4, RFC 5040 §4) on arbitrary bytes: DDP segment
//! headers (tagged and untagged), the Read Request, the Terminate control field and the whole
//! Terminate header (RFC and siw bit order). Parsing never panics, and whatever parses re-emits
//! to bytes that parse to the same Repr.
#![no_main]
use dpwarp::wire::ddp::{HeaderRepr, Segment};
use dpwarp::wire::rdmap::{ReadRequest, ReadRequestRepr, TerminateRepr};
use dpwarp::wire::terminate::TermControl;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(seg) = Segment::new_checked(data) {
        if let Ok(h) = HeaderRepr::parse(&seg) {
            let mut out = Vec::new();
            h.emit_to_vec(&mut out);
            let back = Segment::new_checked(&out[..]).expect("emitted DDP header");
            assert_eq!(HeaderRepr::parse(&back).expect("emitted header parses"), h);
        }
    }
    if let Ok(r) = ReadRequest::new_checked(data) {
        if let Ok(repr) = ReadRequestRepr::parse(&r) {
            let mut out = Vec::new();
            repr.emit_to_vec(&mut out);
            let back = ReadRequest::new_checked(&out[..]).expect("emitted Read Request");
            assert_eq!(ReadRequestRepr::parse(&back).expect("parses"), repr);
        }
    }
    // A control field is sent in RFC order; one with a registered cause must read back the same.
    // (An unregistered cause can read as siw's bit order: the decoder is tolerant on purpose.)
    if let Ok((c, _order)) = TermControl::parse(data) {
        let out = c.emit();
        let back = TermControl::parse(&out).expect("emitted control").0;
        if c.cause.is_registered() {
            assert_eq!(back, c);
        }
    }
    if let Ok((t, _order)) = TerminateRepr::parse(data) {
        if !t.control.cause.is_registered() {
            return;
        }
        let mut out = Vec::new();
        t.emit_to_vec(&mut out);
        assert_eq!(TerminateRepr::parse(&out).expect("emitted Terminate").0, t);
    }
});
