//! Messages on their way between the server and the world, in the
//! supervisor: publishes fanned out to every worker once (`publish`), what
//! was published kept for subscribers that come back (`history`), the
//! cluster link's side of a publish (`relay`), MQTT's retained messages
//! (`retained`), client ids and kept sessions (`sessions`), shared
//! subscription groups (`shared`) and what clients said, sent
//! on to the application (`upstream`).
pub mod history;
pub mod publish;
pub mod relay;
pub mod retained;
pub mod sessions;
pub mod shared;
pub mod upstream;
