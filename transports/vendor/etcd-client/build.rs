// kudurru patch: the protos are compiled once, into src/rpc/generated/ (see pb.rs), so building
// needs no protoc.
fn main() {}
