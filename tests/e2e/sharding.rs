//! The sharded cache across cores: one upstream query per name, whichever core receives it.

use kudurru_e2e::{Kudurru, TestUpstream, dig, unique_name};

#[test]
fn same_name_from_many_source_ports_on_two_cores_reaches_the_upstream_once() {
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()]).cores(2).start();
    let names: Vec<String> = (0..20).map(|_| unique_name("shard")).collect();
    // dig uses a fresh random source port per run: the kernel spreads them over both cores.
    for round in 0..5 {
        for name in &names {
            let answer = dig(k.addr, &[name, "A"]);
            assert_eq!(answer.status, "NOERROR", "round {round}");
        }
    }
    for name in &names {
        assert_eq!(
            upstream.total(name),
            1,
            "{name} asked upstream more than once"
        );
    }
    let udp_queries: f64 = (0..2)
        .filter_map(|c| {
            k.metric(&format!(
                "kudurru_dns_queries_total{{transport=\"udp\",core=\"{c}\"}}"
            ))
        })
        .sum();
    assert_eq!(udp_queries, 100.0);
    let per_core: Vec<f64> = (0..2)
        .filter_map(|c| {
            k.metric(&format!(
                "kudurru_dns_queries_total{{transport=\"udp\",core=\"{c}\"}}"
            ))
        })
        .collect();
    assert!(
        per_core.iter().all(|&q| q > 0.0),
        "both cores received queries: {per_core:?}"
    );
    assert!(k.metric_sum("kudurru_cross_core_lookups_total") >= 1.0);
}
