//! Empty: a build script is what makes cargo build this crate's build-dependencies (and so unify
//! their features with the test build's).

fn main() {}
