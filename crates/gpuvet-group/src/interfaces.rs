//! The IPv4 address of a named network interface, for probing each configured network.

use std::ffi::CStr;
use std::net::Ipv4Addr;

/// The first IPv4 address of interface `name`, or why there is none.
pub(crate) fn ipv4_of(name: &str) -> Result<Ipv4Addr, String> {
    let mut found = None;
    let mut exists = false;
    // SAFETY: getifaddrs fills a linked list that we walk read-only and free once;
    // every pointer is checked for null before it is read.
    unsafe {
        let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
        if libc::getifaddrs(&mut list) != 0 {
            return Err(format!(
                "cannot list network interfaces: {}",
                std::io::Error::last_os_error()
            ));
        }
        let mut entry = list;
        while !entry.is_null() {
            let ifa = &*entry;
            entry = ifa.ifa_next;
            if ifa.ifa_name.is_null() || CStr::from_ptr(ifa.ifa_name).to_bytes() != name.as_bytes()
            {
                continue;
            }
            exists = true;
            if ifa.ifa_addr.is_null() || i32::from((*ifa.ifa_addr).sa_family) != libc::AF_INET {
                continue;
            }
            let addr = &*ifa.ifa_addr.cast::<libc::sockaddr_in>();
            found = Some(Ipv4Addr::from(u32::from_be(addr.sin_addr.s_addr)));
            break;
        }
        libc::freeifaddrs(list);
    }
    match (found, exists) {
        (Some(ip), _) => Ok(ip),
        (None, true) => Err(format!("interface `{name}` has no IPv4 address")),
        (None, false) => Err(format!("this node has no interface `{name}`")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_has_its_address_and_a_made_up_name_has_none() {
        assert_eq!(ipv4_of("lo"), Ok(Ipv4Addr::LOCALHOST));
        assert_eq!(
            ipv4_of("nosuchif0"),
            Err("this node has no interface `nosuchif0`".to_owned())
        );
    }
}
