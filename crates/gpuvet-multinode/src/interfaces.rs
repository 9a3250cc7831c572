//! Network interfaces by name and by address: the IPv4 address of each configured
//! network to probe, and the interface of the data-plane address for Gloo.

use std::ffi::CStr;
use std::net::{IpAddr, Ipv4Addr};

use crate::GroupError;

/// The first IPv4 address of interface `name`, or why there is none.
pub(crate) fn ipv4_of(name: &str) -> Result<Ipv4Addr, GroupError> {
    let addresses = ipv4_addresses()?;
    if let Some(ip) = addresses
        .iter()
        .find_map(|(n, ip)| ip.filter(|_| n == name))
    {
        return Ok(ip);
    }
    let name = name.to_owned();
    if addresses.iter().any(|(n, _)| *n == name) {
        Err(GroupError::NoIpv4 { name })
    } else {
        Err(GroupError::NoSuchInterface { name })
    }
}

/// The interface that holds `ip`, if any does.
pub(crate) fn interface_with(ip: IpAddr) -> Option<String> {
    let IpAddr::V4(ip) = ip else { return None };
    ipv4_addresses()
        .ok()?
        .into_iter()
        .find_map(|(name, address)| (address == Some(ip)).then_some(name))
}

/// Every interface entry, with its IPv4 address when the entry is one.
fn ipv4_addresses() -> Result<Vec<(String, Option<Ipv4Addr>)>, GroupError> {
    let mut found = Vec::new();
    // SAFETY: getifaddrs fills a linked list that we walk read-only and free once;
    // every pointer is checked for null before it is read.
    unsafe {
        let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
        if libc::getifaddrs(&mut list) != 0 {
            return Err(GroupError::ListInterfaces {
                source: std::io::Error::last_os_error(),
            });
        }
        let mut entry = list;
        while !entry.is_null() {
            let ifa = &*entry;
            entry = ifa.ifa_next;
            if ifa.ifa_name.is_null() {
                continue;
            }
            let name = CStr::from_ptr(ifa.ifa_name).to_string_lossy().into_owned();
            let ip = if !ifa.ifa_addr.is_null()
                && i32::from((*ifa.ifa_addr).sa_family) == libc::AF_INET
            {
                let addr = &*ifa.ifa_addr.cast::<libc::sockaddr_in>();
                Some(Ipv4Addr::from(u32::from_be(addr.sin_addr.s_addr)))
            } else {
                None
            };
            found.push((name, ip));
        }
        libc::freeifaddrs(list);
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_has_its_address_and_a_made_up_name_has_none() {
        assert_eq!(ipv4_of("lo").unwrap(), Ipv4Addr::LOCALHOST);
        let missing = ipv4_of("nosuchif0").unwrap_err();
        assert!(
            matches!(&missing, GroupError::NoSuchInterface { name } if name == "nosuchif0"),
            "{missing:?}"
        );
        assert_eq!(
            missing.to_string(),
            "this node has no interface `nosuchif0`"
        );
    }

    #[test]
    fn an_interface_without_ipv4_says_so() {
        // Every interface has a link-layer entry; one with no IPv4 entry, if this
        // machine has one, is named as such.
        let addresses = ipv4_addresses().unwrap();
        if let Some((name, _)) = addresses
            .iter()
            .find(|(n, _)| addresses.iter().all(|(m, ip)| m != n || ip.is_none()))
        {
            let err = ipv4_of(name).unwrap_err();
            assert!(matches!(err, GroupError::NoIpv4 { .. }), "{err:?}");
        }
        let err = GroupError::NoIpv4 {
            name: "ib0".to_owned(),
        };
        assert_eq!(err.to_string(), "interface `ib0` has no IPv4 address");
        // Failures of the system's calls keep their cause.
        let listing = GroupError::ListInterfaces {
            source: std::io::Error::from(std::io::ErrorKind::OutOfMemory),
        };
        assert_eq!(listing.to_string(), "cannot list network interfaces");
        assert!(std::error::Error::source(&listing).is_some());
        let listen = GroupError::InterfaceListen {
            name: "ib0".to_owned(),
            ip: Ipv4Addr::new(10, 0, 0, 1),
            source: std::io::Error::from(std::io::ErrorKind::AddrInUse),
        };
        assert_eq!(
            gpuvet_backend::with_causes(&listen),
            format!(
                "cannot listen on `ib0` (10.0.0.1): {}",
                std::io::Error::from(std::io::ErrorKind::AddrInUse)
            )
        );
    }

    #[test]
    fn loopback_address_is_on_lo_and_a_foreign_one_on_nothing() {
        assert_eq!(
            interface_with(Ipv4Addr::LOCALHOST.into()),
            Some("lo".to_owned())
        );
        assert_eq!(interface_with("192.0.2.77".parse().unwrap()), None);
        assert_eq!(interface_with("::1".parse().unwrap()), None);
    }
}
