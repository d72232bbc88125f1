use std::sync::Arc;

use arc_swap::ArcSwap;

use super::*;
use crate::config::Config;

fn shared() -> Shared {
    let settings = Config::default().validate().unwrap().settings;
    Shared::new(Arc::new(Publisher::new(Arc::new(ArcSwap::from_pointee(
        settings,
    )))))
}

#[test]
fn the_internal_view_is_empty_until_the_first_build() {
    let shared = shared();
    assert_eq!(shared.internal_json(), serde_json::json!({ "zones": [] }));
    assert!(shared.served().is_none());
    let mut metrics = String::new();
    shared.render_metrics(&mut metrics);
    assert!(metrics.contains("# TYPE kudurru_zone_serial gauge"));
    assert!(!metrics.contains("kudurru_zone_serial{"));
    shared.count_failure(b"\x04corp\x07example\x00");
    shared.count_failure(b"\x04corp\x07example\x00");
    let mut metrics = String::new();
    shared.render_metrics(&mut metrics);
    assert!(
        metrics.contains("kudurru_zone_load_failures_total{zone=\"corp.example.\"} 2"),
        "{metrics}"
    );
}
