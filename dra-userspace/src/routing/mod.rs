//! Realm routing, peer selection, session binding (in progress).
