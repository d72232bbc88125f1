//! RFC 1035 zone files through `domain`'s zone-file scanner: `$ORIGIN`, `$TTL`, relative
//! names, every type `domain` knows, `$INCLUDE` only inside an allowed directory; every error
//! names its file and line.
