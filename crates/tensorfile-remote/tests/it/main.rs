//! The remote crate's tests (the test server, moto's S3 when `TENSORFILE_TEST_S3` is set): one binary, so that the library is linked once;
//! each file is a module.
//! Tests that set environment variables (`HF_*`, `AWS_*`) hold
//! `tensorfile_testkit::env_lock()` while they run.

#[cfg(feature = "azure")]
mod azure;
mod common;
mod creds;
mod faults;
mod fetch;
mod fixtures_remote;
#[cfg(feature = "gcs")]
mod gcs;
mod hfcache;
mod hub;
mod plain_servers;
mod reads;
mod s3;
mod s3_anonymous;
mod s3_creds;
mod tls;
mod writes;
