//! The names and variables derived from a `[[files]]` entry.

use graft_driver_core::limits::{self, LimitError};

/// A device name from an entry name: `Seat_01.lic` becomes `seat-01-lic`; an error when
/// nothing is left or the result breaks the API's rules (too long).
pub fn device_name(prefix: Option<&str>, entry: &str) -> Result<String, LimitError> {
    let name = format!(
        "{}{}",
        prefix.unwrap_or_default(),
        limits::label_from(entry)
    );
    limits::check_device_name(&name)?;
    Ok(name)
}

/// `GRAFT_FILE_<NAME>`: the default variable, one per device so that two never clash.
pub fn default_env(device: &str) -> String {
    let mut v = String::from("GRAFT_FILE_");
    v.extend(device.chars().map(|c| {
        if c == '-' {
            '_'
        } else {
            c.to_ascii_uppercase()
        }
    }));
    v
}
