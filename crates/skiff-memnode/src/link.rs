//! An emulated link between a memory node and the workers: its chunks
//! leave no faster than a set bandwidth, so the network-bound regime of the
//! pipeline-groups paper can be reproduced on loopback. Every message takes
//! its turn on one shared wire (all workers' streams together), and a send
//! finishes when its last byte has crossed at the set rate.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// How far a sender may run ahead of the wire (a token bucket's depth, in
/// time).
const BURST: Duration = Duration::from_millis(2);

/// A link of a fixed bandwidth.
#[derive(Debug)]
pub struct Link {
    bytes_per_second: f64,
    /// When the wire is free again.
    free_at: Mutex<Instant>,
}

impl Link {
    /// A link of `bits_per_second` (more than 0).
    pub fn new(bits_per_second: u64) -> Self {
        assert!(bits_per_second > 0, "a link moves data");
        Self {
            bytes_per_second: bits_per_second as f64 / 8.0,
            free_at: Mutex::new(Instant::now()),
        }
    }

    /// How long `bytes` take on the wire alone.
    pub fn time(&self, bytes: usize) -> Duration {
        Duration::from_secs_f64(bytes as f64 / self.bytes_per_second)
    }

    /// Wait until `bytes` have crossed: after everything sent before them.
    pub async fn send(&self, bytes: usize) {
        let transmit = self.time(bytes);
        let done = {
            let mut free_at = self.free_at.lock().unwrap_or_else(|p| p.into_inner());
            let start = (*free_at).max(Instant::now());
            *free_at = start + transmit;
            *free_at
        };
        // Up to BURST ahead of the wire: the timer's millisecond ticks
        // would otherwise make every small message cost a whole tick. The
        // wire's clock still advances by every byte, so the average rate
        // is the set one.
        if let Some(wake) = done.checked_sub(BURST)
            && wake > Instant::now()
        {
            tokio::time::sleep_until(wake).await;
        }
    }
}

/// A bandwidth as `--link-bandwidth` takes it: a number and `bit`,
/// `Kbit`, `Mbit` or `Gbit` (powers of 1000, per second), e.g. `10Gbit`;
/// in bits per second.
pub fn parse_bandwidth(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let scale = match unit.trim().to_ascii_lowercase().as_str() {
        "bit" | "b/s" | "bps" => 1.0,
        "kbit" => 1e3,
        "mbit" => 1e6,
        "gbit" => 1e9,
        _ => {
            return Err(format!(
                "bad bandwidth '{text}': a number and bit, Kbit, Mbit or Gbit (e.g. 10Gbit)"
            ));
        }
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("bad bandwidth '{text}': no number before the unit"))?;
    let bits = value * scale;
    if !bits.is_finite() || bits < 1.0 || bits > u64::MAX as f64 {
        return Err(format!("bad bandwidth '{text}': out of range"));
    }
    Ok(bits as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bandwidths_parse() {
        assert_eq!(parse_bandwidth("10Gbit"), Ok(10_000_000_000));
        assert_eq!(parse_bandwidth("1.5 Gbit"), Ok(1_500_000_000));
        assert_eq!(parse_bandwidth("100mbit"), Ok(100_000_000));
        assert_eq!(parse_bandwidth("800Kbit"), Ok(800_000));
        for bad in ["", "10", "Gbit", "10GB", "-1Gbit", "0Gbit", "1e400Gbit"] {
            assert!(parse_bandwidth(bad).is_err(), "{bad}");
        }
    }

    #[tokio::test]
    async fn sends_share_the_wire_at_its_rate() {
        // 8 Mbit/s = 1 MB/s: two 50 kB sends together take 100 ms at least
        // (one after the other on the wire), less the burst allowed.
        let link = std::sync::Arc::new(Link::new(8_000_000));
        let started = Instant::now();
        let a = {
            let link = std::sync::Arc::clone(&link);
            datafusion::common::runtime::SpawnedTask::spawn(async move {
                link.send(50_000).await;
            })
        };
        link.send(50_000).await;
        a.join().await.unwrap();
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(100) - BURST, "{took:?}");
        // The wire's clock moved by exactly the two sends (not measured:
        // computed), so it was not reserved twice over.
        let free_at = *link.free_at.lock().unwrap();
        assert!(free_at >= started + Duration::from_millis(100));
        assert!(free_at <= started + Duration::from_millis(100) + took);
    }
}
