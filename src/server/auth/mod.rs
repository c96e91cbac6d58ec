//! Who a connection is and what it may do (`server --auth jwt`): the
//! token check (`jwt`) and, inside each worker, the identities, expiries
//! and topic permissions of its connections (`gate`); what a permission
//! pattern allows of a topic or an MQTT filter (`scope`); mosquitto's
//! password and ACL files for MQTT clients (`mosquitto`).
pub(crate) mod authz;
pub(crate) mod gate;
pub(crate) mod hook_acl;
pub(crate) mod jwt;
pub(crate) mod mosquitto;
pub(crate) mod scope;
