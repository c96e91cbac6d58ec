//! Tests of the MQTT codec as a whole.
