//! Byte counts as people read them, for messages.

/// `bytes` in the largest binary unit that keeps the number at 1 or more, with one decimal
/// ("512 B", "1.5 KiB", "23.7 GiB"): small sizes stay visible instead of rounding to 0.0 GB.
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::format_bytes;

    #[test]
    fn units_keep_small_sizes_visible() {
        assert_eq!(format_bytes(0), "0 B");
        assert_eq!(format_bytes(1023), "1023 B");
        assert_eq!(format_bytes(1536), "1.5 KiB");
        assert_eq!(format_bytes(51 << 20), "51.0 MiB");
        assert_eq!(format_bytes(25_447_170_048), "23.7 GiB");
        assert_eq!(format_bytes(u64::MAX), "16.0 EiB");
    }
}
