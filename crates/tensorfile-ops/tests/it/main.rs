//! The operations' integration tests: one binary, each file a module.
//! Each holds an operation's `--json` schema to its docs page.

mod describe_schema;
mod ops_schema;
mod uploads;
