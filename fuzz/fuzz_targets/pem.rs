//! Arbitrary bytes as a certificate chain and a private key (PEM), as `tls.certFile` and
//! `tls.keyFile` or `api.tlsCert` and `api.tlsKey` would hold them: never panics; a refusal
//! names the file at fault.
#![no_main]

use std::path::Path;

use kudurru_control::certs::server_config_from_pem;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (&[u8], &[u8])| {
    let (cert, key) = input;
    if let Err(e) = server_config_from_pem(cert, key, Path::new("c.pem"), Path::new("k.pem")) {
        let text = e.to_string();
        assert!(text.contains("c.pem") || text.contains("k.pem"), "{text}");
    }
});
