//! A host stopped and started again on the same store.
