//! Memory regions over application-owned buffers: a storage target reads a file straight into
//! a registered buffer (`Pd::reg_mr_from` + `Mr::bytes_mut`) and RDMA-Writes it from there, and
//! the peer reads what was placed in place (`Mr::bytes`) — no staging copy on either side.

mod common;

use dpwarp::verbs::smallvec;
use std::io::{Read, Seek, SeekFrom, Write};

use common::*;
use dpwarp::cm::ConnParam;
use dpwarp::verbs::{sge, Access, Opcode, SendWr};

#[test]
fn file_read_into_a_registered_buffer_is_rdma_written_without_staging() {
    const N: usize = 256 * 1024;
    let (c, s) = connect_pair(Link::Kernel, ConnParam::default(), ConnParam::default()).unwrap();

    // The "disk": a temporary file with a known pattern.
    let path = std::env::temp_dir().join(format!("dpwarp-appbuf-{}", std::process::id()));
    let mut f = std::fs::File::options()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    f.write_all(&pattern(9, N)).unwrap();
    f.seek(SeekFrom::Start(0)).unwrap();

    // The target's own buffer becomes the region; the file is read into it in place.
    let buf = vec![0u8; N];
    let app_ptr = buf.as_ptr();
    let src = c.pd.reg_mr_from(buf, Access::LOCAL_WRITE);
    {
        let mut b = src.bytes_mut();
        assert_eq!(
            b.as_ptr(),
            app_ptr,
            "the application's buffer is the region"
        );
        f.read_exact(&mut b).unwrap();
    }
    drop(f);
    let _ = std::fs::remove_file(&path);

    let dst =
        s.pd.reg_mr_from(vec![0u8; N], Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    c.qp.post_send(SendWr {
        wr_id: 1,
        opcode: Opcode::Write {
            remote_addr: dst.addr(),
            rkey: dst.stag(),
        },
        sg_list: smallvec![sge(&src, 0, N)],
        signaled: true,
    })
    .unwrap();
    wc_ok(&c.cq);
    // A Send after the Write: when it arrives, the Write before it has been placed.
    let note = s.pd.reg_mr(16, Access::LOCAL_WRITE);
    s.qp.post_recv(dpwarp::verbs::RecvWr {
        wr_id: 2,
        sg_list: smallvec![sge(&note, 0, 16)],
    })
    .unwrap();
    c.qp.post_send(SendWr {
        wr_id: 3,
        opcode: Opcode::Send,
        sg_list: smallvec![sge(&src, 0, 4)],
        signaled: true,
    })
    .unwrap();
    wc_ok(&c.cq);
    wc_ok(&s.cq);
    assert!(
        *dst.bytes() == pattern(9, N)[..],
        "file bytes arrived in place"
    );
}
