//! A store that cannot be written.
