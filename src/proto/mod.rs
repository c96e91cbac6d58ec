//! Wire protocols spoken between megaconn clients and servers.
pub mod frame;
