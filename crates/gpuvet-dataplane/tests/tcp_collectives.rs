//! The TCP collectives between ranks on loopback, one thread per rank: correct results
//! and a positive busbw for 2, 3 and 4 ranks, even and uneven sizes.

mod tcp_support;

use std::time::Instant;

use gpuvet_backend::per_rail_busbw;
use gpuvet_backend::{BackendError, CancelToken};
use gpuvet_dataplane::tcp::{CollectiveSpec, TcpGroup, Topology, multi_all_reduce};
use tcp_support::{DEADLINE, assert_good, listeners, message, run_ranks, small_spec, spec_for};

/// 1 MiB, 1001 elements (not divisible by 2, 3 or 4), and a single element.
const SIZES: [u64; 3] = [1 << 20, 4 * 1001, 4];

fn deadline() -> Instant {
    Instant::now() + DEADLINE
}

#[test]
fn all_reduce_is_correct_for_two_three_and_four_ranks() {
    for ranks in 2..=4 {
        for bytes in SIZES {
            let results = run_ranks(ranks, Topology::Ring, |_, group| {
                group.all_reduce(&small_spec(bytes), deadline(), &CancelToken::new())
            });
            for (rank, result) in results.into_iter().enumerate() {
                let sample = result
                    .unwrap_or_else(|e| panic!("{ranks} ranks, {bytes} bytes, rank {rank}: {e}"));
                assert_good(&sample, ranks);
                assert_eq!(sample.params["rank"], rank.to_string());
                assert_eq!(sample.params["bytes"], bytes.to_string());
            }
        }
    }
}

#[test]
fn all_gather_is_correct_for_two_three_and_four_ranks() {
    for ranks in 2..=4 {
        for bytes in SIZES {
            let results = run_ranks(ranks, Topology::Ring, |_, group| {
                group.all_gather(&small_spec(bytes), deadline(), &CancelToken::new())
            });
            for result in results {
                let sample = result.unwrap();
                assert_good(&sample, ranks);
                // S = per-rank count × n × 4, the per-rank count rounded up.
                let per_rank = (bytes / 4).max(1).div_ceil(ranks as u64);
                assert_eq!(
                    sample.params["bytes"],
                    (per_rank * ranks as u64 * 4).to_string()
                );
            }
        }
    }
}

#[test]
fn all_to_all_is_correct_for_two_three_and_four_ranks() {
    for ranks in 2..=4 {
        for bytes in SIZES {
            let results = run_ranks(ranks, Topology::FullMesh, |_, group| {
                group.all_to_all(&small_spec(bytes), deadline(), &CancelToken::new())
            });
            for result in results {
                assert_good(&result.unwrap(), ranks);
            }
        }
    }
}

#[test]
fn all_to_all_on_a_ring_of_four_is_unsupported() {
    // (A ring of 3 connects every pair, so it would do.)
    let results = run_ranks(4, Topology::Ring, |_, group| {
        group.all_to_all(&small_spec(1024), deadline(), &CancelToken::new())
    });
    for result in results {
        assert!(
            matches!(result, Err(BackendError::Unsupported(ref m)) if m.contains("full-mesh")),
            "{result:?}"
        );
    }
}

#[test]
fn one_group_runs_several_collectives_in_a_row() {
    let results = run_ranks(3, Topology::FullMesh, |_, group| {
        let cancel = CancelToken::new();
        let spec = small_spec(256 << 10);
        let reduced = group.all_reduce(&spec, deadline(), &cancel)?;
        let gathered = group.all_gather(&spec, deadline(), &cancel)?;
        let exchanged = group.all_to_all(&spec, deadline(), &cancel)?;
        let stats = group.last_link_stats().to_vec();
        Ok((reduced, gathered, exchanged, stats))
    });
    for (rank, result) in results.into_iter().enumerate() {
        let (reduced, gathered, exchanged, stats) = result.unwrap();
        for sample in [&reduced, &gathered, &exchanged] {
            assert_good(sample, 3);
        }
        // Full mesh of 3: two links, both used by the all-to-all, with per-peer timing.
        assert_eq!(stats.len(), 2);
        assert!(
            stats
                .iter()
                .all(|link| link.rank != rank && link.bytes_sent > 0 && link.bytes_received > 0)
        );
        let peer = (rank + 2) % 3;
        assert!(
            exchanged
                .extra
                .contains_key(&format!("recv_wait_s.rank{peer}")),
            "{exchanged:?}"
        );
    }
}

#[test]
fn busbw_follows_nccl_tests_from_the_measured_algbw() {
    let results = run_ranks(4, Topology::Ring, |_, group| {
        group.all_reduce(&small_spec(1 << 20), deadline(), &CancelToken::new())
    });
    for result in results {
        let sample = result.unwrap();
        // busbw = algbw × 2(n−1)/n per iteration, so the medians agree too.
        let ratio = sample.value / sample.extra["algbw"];
        assert!((ratio - 1.5).abs() < 1e-9, "{sample:?}");
    }
}

#[test]
fn host_network_collective_reports_latency_bandwidth_and_engine() {
    let results = run_ranks(2, Topology::Ring, |_, group| {
        group.host_network_collective(&small_spec(1 << 20), deadline(), &CancelToken::new())
    });
    for result in results {
        let sample = result.unwrap();
        assert_good(&sample, 2);
        assert!(sample.extra["latency_us"] > 0.0, "{sample:?}");
        assert_eq!(sample.params["engine"], "gpuvet-tcp");
    }
}

#[test]
fn multi_all_reduce_reports_every_rail() {
    const RAILS: usize = 2;
    const RANKS: usize = 3;
    // One listener set per rail, as each rail has its own addresses.
    let rails: Vec<_> = (0..RAILS).map(|_| listeners(RANKS)).collect();
    let cancel = CancelToken::new();
    let deadline = deadline();
    let results: Vec<_> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..RANKS)
            .map(|rank| {
                let (rails, cancel) = (&rails, &cancel);
                scope.spawn(move || {
                    let mut groups: Vec<TcpGroup> = rails
                        .iter()
                        .enumerate()
                        .map(|(rail, (listeners, addrs))| {
                            let spec = spec_for(rank, addrs, 10 + rail as u64, Topology::Ring);
                            TcpGroup::establish(&spec, &listeners[rank], deadline, cancel).unwrap()
                        })
                        .collect();
                    multi_all_reduce(&mut groups, &small_spec(512 << 10), deadline, cancel)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for per_rank in results {
        assert_eq!(per_rank.len(), RAILS);
        for (rail, result) in per_rank.iter().enumerate() {
            let sample = result.as_ref().unwrap();
            assert_good(sample, RANKS);
            assert_eq!(sample.params["rail"], rail.to_string());
        }
        let busbw = per_rail_busbw(&per_rank);
        assert_eq!(busbw.keys().collect::<Vec<_>>(), ["rail0", "rail1"]);
    }
}

#[test]
fn ranks_that_disagree_on_the_collective_fail_and_name_the_peer() {
    let results = run_ranks(2, Topology::Ring, |rank, group| {
        let spec = small_spec(4096);
        if rank == 0 {
            group.all_reduce(&spec, deadline(), &CancelToken::new())
        } else {
            group.all_gather(&spec, deadline(), &CancelToken::new())
        }
    });
    let first = message(results.into_iter().next().unwrap());
    assert!(first.contains("rank 1 (`127.0.0.1:"), "{first}");
    assert!(first.contains("entered all-gather #1"), "{first}");
}

#[test]
fn a_rank_that_enters_late_is_waited_for_not_called_stalled() {
    let stall = std::time::Duration::from_millis(500);
    let results = run_ranks(3, Topology::Ring, |rank, group| {
        if rank == 2 {
            // Late by several stall timeouts, e.g. still finishing the previous check.
            std::thread::sleep(stall * 4);
        }
        let spec = CollectiveSpec {
            stall_timeout: stall,
            ..small_spec(1 << 20)
        };
        group.all_reduce(&spec, deadline(), &CancelToken::new())
    });
    for result in results {
        assert_good(&result.unwrap(), 3);
    }
}

#[test]
fn default_sizing_gives_each_rank_a_segment_within_limits() {
    let spec = CollectiveSpec::from_work(&gpuvet_backend::WorkSpec::default());
    assert_eq!(spec.bytes, None);
    assert!(spec.min_iterations >= 5 && spec.min_seconds >= 0.5 && spec.warmup_iterations >= 1);
    assert_eq!(CollectiveSpec::default_bytes(2), 1 << 20);
    assert_eq!(CollectiveSpec::default_bytes(16), 8 << 20);
    assert_eq!(CollectiveSpec::default_bytes(4096), 64 << 20);
    let sized = CollectiveSpec::from_work(&gpuvet_backend::WorkSpec {
        collective_bytes: Some(1234),
        ..gpuvet_backend::WorkSpec::default()
    });
    assert_eq!(sized.bytes, Some(1234));
}

#[test]
fn a_default_sized_all_reduce_runs_for_its_minimum_time() {
    let results = run_ranks(2, Topology::Ring, |_, group| {
        let spec = CollectiveSpec {
            min_seconds: 0.2,
            ..CollectiveSpec::default()
        };
        group.all_reduce(&spec, deadline(), &CancelToken::new())
    });
    for result in results {
        let sample = result.unwrap();
        assert_good(&sample, 2);
        assert_eq!(sample.params["bytes"], (1 << 20).to_string());
        // Short iterations are grouped into windows of at least 20 ms.
        let iterations: usize = sample.params["iterations"].parse().unwrap();
        assert!(sample.samples.len() <= iterations, "{sample:?}");
    }
}
