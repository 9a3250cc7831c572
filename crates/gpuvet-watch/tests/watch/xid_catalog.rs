//! The XID catalog: every catalogued XID maps to the class and lane docs/reference.md gives,
//! and an unknown XID means contact support.

use gpuvet_model::results::Lane;
use gpuvet_watch::policy::{GpuId, Severity, XidObservation, XidPolicy};
use gpuvet_watch::xid::{self, ActionClass, XID_CATALOG};

/// docs/reference.md, "XID → action": (xid, action, lane, fatal).
const EXPECTED: &[(u32, ActionClass, Lane, bool)] = &[
    (13, ActionClass::AppError, Lane::App, false),
    (31, ActionClass::AppError, Lane::App, false),
    (43, ActionClass::RecordOnly, Lane::App, false),
    (45, ActionClass::RecordOnly, Lane::App, false),
    (48, ActionClass::ResetGpu, Lane::Host, true),
    (63, ActionClass::RecordOnly, Lane::Host, false),
    (64, ActionClass::ResetGpu, Lane::Host, true),
    (74, ActionClass::ResetGpu, Lane::Host, true),
    (79, ActionClass::RebootNode, Lane::Host, true),
    (92, ActionClass::RecordOnly, Lane::Host, false),
    (94, ActionClass::RestartApp, Lane::Host, false),
    (95, ActionClass::ResetGpu, Lane::Host, true),
    (119, ActionClass::ResetGpu, Lane::Host, true),
    (120, ActionClass::ResetGpu, Lane::Host, true),
    (140, ActionClass::ResetGpu, Lane::Host, true),
];

#[test]
fn reference_xids_have_their_class_and_lane() {
    for &(x, action, lane, fatal) in EXPECTED {
        let e = xid::lookup(x).unwrap_or_else(|| panic!("XID {x} missing from the catalog"));
        assert_eq!(
            (e.action, e.lane, e.fatal),
            (action, lane, fatal),
            "XID {x}"
        );
        assert!(!e.source.is_empty(), "XID {x} has no source");
        assert_eq!(xid::classify(x), *e);
    }
}

#[test]
fn every_catalogued_xid_is_consistent() {
    for e in XID_CATALOG {
        assert_eq!(xid::classify(e.xid), *e);
        assert!(e.is_known());
        // Fatal means the GPU or node needs hands-on action; non-fatal never does
        // except when support is the only answer.
        if e.fatal {
            assert!(
                e.action.needs_hardware_action(),
                "XID {} fatal but {}",
                e.xid,
                e.action
            );
        } else {
            assert!(
                !e.action.needs_hardware_action() || e.action == ActionClass::ContactSupport,
                "XID {} not fatal but {}",
                e.xid,
                e.action
            );
        }
    }
}

#[test]
fn unknown_xids_mean_contact_support() {
    for x in [0, 1, 999, 100_000, u32::MAX] {
        let e = xid::classify(x);
        assert!(!e.is_known());
        assert_eq!(
            (e.action, e.lane, e.xid),
            (ActionClass::ContactSupport, Lane::Host, x)
        );
        assert!(e.escalations.is_empty());
    }
}

#[test]
fn xid_45_never_escalates_and_79_does() {
    assert!(xid::classify(45).escalations.is_empty());
    assert_eq!(xid::classify(79).escalations[0].min_incidents, 2);
    for x in [48, 95, 140] {
        assert_eq!(xid::classify(x).escalations[0].min_incidents, 5, "XID {x}");
        assert_eq!(
            xid::classify(x).escalations[0].action,
            ActionClass::ContactSupport
        );
    }
}

/// Through the policy, each catalogued XID's first sighting carries the catalog's class
/// and lane (one GPU, so the node-wide rule cannot apply).
#[test]
fn first_sighting_of_every_xid_carries_class_and_lane() {
    let mut policy = XidPolicy::default();
    let gpu = GpuId::new(Some(0), Some("0000:3b:00"));
    policy.register_gpus(std::slice::from_ref(&gpu));
    let mut xids: Vec<u32> = XID_CATALOG.iter().map(|e| e.xid).collect();
    xids.push(4242);
    for (i, &x) in xids.iter().enumerate() {
        policy.observe(&XidObservation {
            gpu: gpu.clone(),
            xid: x,
            time_ms: 1_000 + i as u64,
            boot_id: "b".into(),
            pid: None,
            text: String::new(),
            source: "kmsg".into(),
        });
    }
    let findings = policy.flush();
    assert_eq!(findings.len(), xids.len());
    for f in findings {
        let x = f.xid.unwrap();
        let e = xid::classify(x);
        assert_eq!((f.action, f.lane), (e.action, e.lane), "XID {x}");
        assert_eq!(f.severity, Severity::for_action(e.action));
        assert!(!f.escalated);
        assert_eq!(f.count, 1);
        assert_eq!(f.gpu.as_ref().and_then(|g| g.index), Some(0));
    }
}
