//! Who a connection is and what it may do (`server --auth jwt`): the
//! token check (`jwt`) and, inside each worker, the identities, expiries
//! and topic permissions of its connections (`gate`).
pub(crate) mod gate;
pub(crate) mod jwt;
