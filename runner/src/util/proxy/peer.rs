//! Who is on the other end of a loopback TCP connection: the uid that owns
//! the client's socket, from `/proc/net/tcp` (the kernel's socket table of
//! the runner's network namespace). The agents' forwarder serves only the
//! runner's uid, the agents' (`--agent-uid`) and root, so another user of
//! the host cannot use the operator's proxy credentials through it. A
//! connection whose owner cannot be found is refused.

use std::net::{Ipv4Addr, SocketAddr};

/// The uid owning the socket at `peer` connected to `local`, both on
/// IPv4 loopback; `None` when the table has no such connection.
pub fn owner(peer: SocketAddr, local: SocketAddr) -> Option<u32> {
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    owner_in(&table, peer, local)
}

fn owner_in(table: &str, peer: SocketAddr, local: SocketAddr) -> Option<u32> {
    let (want_local, want_remote) = (hex(peer)?, hex(local)?);
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (l, r, uid) = (fields.get(1)?, fields.get(2)?, fields.get(7)?);
        (l.eq_ignore_ascii_case(&want_local) && r.eq_ignore_ascii_case(&want_remote))
            .then(|| uid.parse().ok())
            .flatten()
    })
}

/// The table's `ADDR:PORT` form: the address as the kernel's in-memory
/// `u32` in hex (so byte order is the host's), the port in hex.
fn hex(addr: SocketAddr) -> Option<String> {
    let SocketAddr::V4(v4) = addr else {
        return None;
    };
    let ip: Ipv4Addr = *v4.ip();
    Some(format!(
        "{:08X}:{:04X}",
        u32::from_ne_bytes(ip.octets()),
        v4.port()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_owner_of_a_loopback_connection() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (_server, peer) = listener.accept().unwrap();
        assert_eq!(peer, client.local_addr().unwrap());
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        assert_eq!(owner(peer, listener.local_addr().unwrap()), Some(me));
        // The reverse direction is another entry (the server's socket,
        // ours too); an unknown pair is none.
        let other: SocketAddr = "127.0.0.1:1".parse().unwrap();
        assert_eq!(owner(other, listener.local_addr().unwrap()), None);
    }

    #[test]
    fn reads_the_kernels_table_format() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   \
            0: 0100007F:9C40 0100007F:0050 01 00000000:00000000 00:00000000 00000000  1234        0 1 1 0000000000000000 20 4 30 10 -1\n";
        let le = cfg!(target_endian = "little");
        let (peer, local): (SocketAddr, SocketAddr) = if le {
            (
                "127.0.0.1:40000".parse().unwrap(),
                "127.0.0.1:80".parse().unwrap(),
            )
        } else {
            (
                "1.0.0.127:40000".parse().unwrap(),
                "1.0.0.127:80".parse().unwrap(),
            )
        };
        assert_eq!(owner_in(table, peer, local), Some(1234));
        assert_eq!(owner_in(table, local, peer), None);
    }
}
