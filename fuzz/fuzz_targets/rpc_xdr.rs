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
        assert_eq!(
            CallRepr::parse(&mut XdrReader::new(w.as_slice())).expect("re-parse"),
            c
        );
        let _ = ConfigReq::parse(&mut r);
    }
    let mut r = XdrReader::new(data);
    if let Ok(rep) = ReplyRepr::parse(&mut r) {
        let mut w = XdrWriter::new();
        rep.emit(&mut w);
        assert_eq!(
            ReplyRepr::parse(&mut XdrReader::new(w.as_slice())).expect("re-parse"),
            rep
        );
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
    let mut pushed = Vec::new();
    'push: for piece in data.chunks(7) {
        d.push(piece);
        loop {
            match d.next_record() {
                Ok(Some(rec)) => {
                    assert!(rec.len() <= 1 << 16);
                    pushed.push(rec);
                }
                Ok(None) => break,
                Err(_) => break 'push,
            }
        }
    }
    // The same octets again, as a socket reader feeds them: `consume` in pieces of varying
    // size, and while a fragment's octets are due, appended to the record directly. The same
    // records must come out, in order.
    let mut d = RecordDecoder::new(1 << 16);
    let mut direct = Vec::new();
    let mut at = 0;
    let mut step = 1 + usize::from(data.first().copied().unwrap_or(0) % 13);
    while at < data.len() {
        let n = step.min(data.len() - at);
        step = 1 + (step * 7 + 3) % 29;
        let rec = if let Some((rec, left)) = d.fragment_room().filter(|(_, l)| *l > 0 && n % 2 == 0)
        {
            let k = n.min(left);
            rec.extend_from_slice(&data[at..at + k]);
            at += k;
            d.appended(k).expect("no more than the fragment holds")
        } else {
            match d.consume(&data[at..at + n]) {
                Ok((k, rec)) => {
                    assert!(k <= n);
                    at += k;
                    rec
                }
                Err(_) => break,
            }
        };
        if let Some(rec) = rec {
            direct.push(rec);
        }
    }
    assert_eq!(pushed, direct);
});
