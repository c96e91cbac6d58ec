//! Service-time distributions for the simulated business call.
//!
//! `classic` is exactly the published experiment: draw a level uniformly in
//! 1..=999; <= 900 -> 1 ms, <= 950 -> 10 ms, <= 990 -> 100 ms, else 1000 ms.
//! So 1000 ms has probability 9/999 and the mean is 14400/999 ≈ 14.41 ms.
//! Also: weighted lists `1ms:90%,10ms:5%,100ms:4%,1000ms:1%` (weights must
//! add up to 100%), `0`, and fixed values like `5ms`.

use rand::Rng;
use std::str::FromStr;
use std::time::Duration;

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) enum ServiceTime {
    Classic,
    Fixed(Duration),
    /// (duration, cumulative weight in parts per million)
    Weighted(Vec<(Duration, u32)>),
}

impl FromStr for ServiceTime {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        const EX: &str = "expected classic, 0, a fixed time like 5ms, or a weighted list like 1ms:90%,10ms:5%,100ms:4%,1000ms:1%";
        let s = s.trim();
        if s == "classic" {
            return Ok(ServiceTime::Classic);
        }
        if !s.contains(':') {
            return crate::values::duration(s).map(ServiceTime::Fixed).map_err(|e| format!("{e}; {EX}"));
        }
        let mut total = 0u32;
        let mut out = Vec::new();
        for part in s.split(',') {
            let (d, w) = part.split_once(':').ok_or_else(|| format!("'{part}' is not time:weight%; {EX}"))?;
            let d = crate::values::duration(d).map_err(|e| format!("{e}; {EX}"))?;
            let w = w.trim().strip_suffix('%').ok_or_else(|| format!("weight '{w}' needs a % sign; {EX}"))?;
            let w: f64 = w.trim().parse().map_err(|_| format!("weight '{w}%' is not a number; {EX}"))?;
            if !(w > 0.0 && w <= 100.0) {
                return Err(format!("weight {w}% must be above 0% and at most 100%; {EX}"));
            }
            total += (w * 10_000.0).round() as u32;
            out.push((d, total));
        }
        if total != 1_000_000 {
            return Err(format!("weights add up to {}%, not 100%; {EX}", total as f64 / 10_000.0));
        }
        Ok(ServiceTime::Weighted(out))
    }
}

impl ServiceTime {
    pub(crate) fn sample(&self, rng: &mut impl Rng) -> Duration {
        match self {
            ServiceTime::Classic => Duration::from_millis(classic_level(rng.gen_range(1..=999))),
            ServiceTime::Fixed(d) => *d,
            ServiceTime::Weighted(v) => {
                let x = rng.gen_range(0..1_000_000u32);
                v.iter().find(|(_, cum)| x < *cum).map(|(d, _)| *d).unwrap_or(v[v.len() - 1].0)
            }
        }
    }

    /// The distribution's mean, in ms: the floor any system's mean latency
    /// sits on.
    pub(crate) fn mean_ms(&self) -> f64 {
        match self {
            ServiceTime::Classic => (1..=999).map(classic_level).sum::<u64>() as f64 / 999.0,
            ServiceTime::Fixed(d) => d.as_secs_f64() * 1e3,
            ServiceTime::Weighted(v) => {
                let mut prev = 0;
                v.iter()
                    .map(|(d, cum)| {
                        let w = (cum - prev) as f64 / 1e6;
                        prev = *cum;
                        w * d.as_secs_f64() * 1e3
                    })
                    .sum()
            }
        }
    }

    pub(crate) fn is_zero(&self) -> bool {
        matches!(self, ServiceTime::Fixed(d) if d.is_zero())
    }
}

fn classic_level(level: u32) -> u64 {
    match level {
        0..=900 => 1,
        901..=950 => 10,
        951..=990 => 100,
        _ => 1000,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn classic_mean_is_14400_over_999() {
        assert!((ServiceTime::Classic.mean_ms() - 14400.0 / 999.0).abs() < 1e-9);
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        let n = 200_000;
        let mean: f64 = (0..n).map(|_| ServiceTime::Classic.sample(&mut rng).as_secs_f64() * 1e3).sum::<f64>() / n as f64;
        assert!((mean - 14.41).abs() < 1.0, "{mean}");
    }

    #[test]
    fn parses_lists_and_rejects_bad_weights() {
        let w: ServiceTime = "1ms:90%,10ms:5%,100ms:4%,1000ms:1%".parse().unwrap();
        assert!((w.mean_ms() - 15.4).abs() < 1e-9, "{}", w.mean_ms());
        assert_eq!("0".parse::<ServiceTime>().unwrap(), ServiceTime::Fixed(Duration::ZERO));
        assert_eq!("5ms".parse::<ServiceTime>().unwrap(), ServiceTime::Fixed(Duration::from_millis(5)));
        assert!("1ms:90%,10ms:5%".parse::<ServiceTime>().unwrap_err().contains("95%"));
        assert!("1ms:90".parse::<ServiceTime>().unwrap_err().contains("% sign"));
        assert!("fast".parse::<ServiceTime>().is_err());
    }
}
