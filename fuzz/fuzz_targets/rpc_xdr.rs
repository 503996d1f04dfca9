//! XDR and ONC RPC parsers on arbitrary bytes: call and reply headers (with AUTH_SYS bodies),
//! the CONFIG_RDMA arguments, MSGP-padded opaques and record marking. Nothing panics; parsed
//! calls and replies re-emit to the same value.
#![no_main]
use dpwarp::rpc::ConfigReq;
use dpwarp::wire::oncrpc::{CallRepr, RecordDecoder, ReplyRepr};
use dpwarp::wire::xdr::{Padding, XdrReader, XdrWriter};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut r = XdrReader::new(data);
    if let Ok(c) = CallRepr::parse(&mut r) {
        let mut w = XdrWriter::new();
        c.emit(&mut w);
        assert_eq!(CallRepr::parse(&mut XdrReader::new(w.as_slice())).expect("re-parse"), c);
        let _ = ConfigReq::parse(&mut r);
    }
    let mut r = XdrReader::new(data);
    if let Ok(rep) = ReplyRepr::parse(&mut r) {
        let mut w = XdrWriter::new();
        rep.emit(&mut w);
        assert_eq!(ReplyRepr::parse(&mut XdrReader::new(w.as_slice())).expect("re-parse"), rep);
    }
    if data.len() >= 2 {
        let align = 1u32 << (data[0] % 17);
        let p = Padding {
            align,
            thresh: u32::from(data[1]),
        };
        if let Ok(p) = p.validate() {
            let mut r = XdrReader::new(&data[2..]);
            r.set_padding(Some(p), usize::from(data[1]));
            while r.get_opaque(1 << 20).is_ok() {}
        }
    }
    let mut d = RecordDecoder::new(1 << 16);
    for piece in data.chunks(7) {
        d.push(piece);
        loop {
            match d.next_record() {
                Ok(Some(rec)) => assert!(rec.len() <= 1 << 16),
                Ok(None) | Err(_) => break,
            }
        }
    }
});
