//! Azurite (Azure Blob Storage's emulator, from npm) for the tests and
//! benchmarks: its well-known account and key, and making a container,
//! which object stores cannot do (a SharedKey-signed
//! `PUT ?restype=container`; Azurite checks the signature).

use base64::Engine;
use sha2::{Digest, Sha256};

/// Azurite's well-known account (public: its documentation's).
pub const ACCOUNT: &str = "devstoreaccount1";
/// Azurite's well-known account key (public: its documentation's).
pub const KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// HMAC-SHA256, as SharedKey and SAS signatures use it.
pub fn hmac_sha256(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut k = [0u8; 64];
    if key.len() > 64 {
        k[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        k[..key.len()].copy_from_slice(key);
    }
    let mut inner = Sha256::new();
    inner.update(k.map(|b| b ^ 0x36));
    inner.update(data);
    let mut outer = Sha256::new();
    outer.update(k.map(|b| b ^ 0x5c));
    outer.update(inner.finalize());
    outer.finalize().to_vec()
}

/// Makes a container at Azurite's blob endpoint (`http://127.0.0.1:PORT`,
/// the account in the path), signed with the account key; one that is
/// there already is fine.
///
/// # Errors
/// The request fails, or Azurite answers other than 201 or 409.
pub fn create_container(endpoint: &str, name: &str) -> Result<(), String> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let date = http_date_now();
    let version = "2021-08-06";
    let to_sign = format!(
        "PUT\n\n\n\n\n\n\n\n\n\n\n\nx-ms-date:{date}\nx-ms-version:{version}\n/{ACCOUNT}/{ACCOUNT}/{name}\nrestype:container"
    );
    let key = b64.decode(KEY).map_err(|e| e.to_string())?;
    let sig = b64.encode(hmac_sha256(&key, to_sign.as_bytes()));
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let answer = agent
        .put(format!(
            "{}/{ACCOUNT}/{name}?restype=container",
            endpoint.trim_end_matches('/')
        ))
        .header("x-ms-date", &date)
        .header("x-ms-version", version)
        .header("authorization", format!("SharedKey {ACCOUNT}:{sig}"))
        .send_empty()
        .map_err(|e| e.to_string())?;
    match answer.status().as_u16() {
        201 | 409 => Ok(()),
        s => Err(format!("create container {name}: HTTP {s}")),
    }
}

/// Now in RFC 1123, as `x-ms-date` wants it.
fn http_date_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let weekday = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][days.rem_euclid(7) as usize];
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let month = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ][(m - 1) as usize];
    format!(
        "{weekday}, {d:02} {month} {y} {:02}:{:02}:{:02} GMT",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}
