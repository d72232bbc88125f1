//! kudurru-bench: benchmark tools. Today it holds `kudurru-echo` (the batched ceiling responder
//! and benchmark upstream, `src/bin/echo.rs`) and the peer comparison driver
//! (`benches/peers/compare.py`); the load generator `kudurru-bench` joins it.
