//! Random values the TPC-C way (clause 2.1.6 NURand, 4.3.2 strings, 4.3.2.3
//! last names), on a small fast deterministic generator so a seed reproduces
//! a population and a workload.

/// wyrand: 64-bit state, one multiply per value, passes BigCrush; plenty for
/// a benchmark and fast at `opt-level = 0`, where the tests run.
#[derive(Clone, Debug)]
pub struct Rng(u64);

const ALNUM: &[u8; 62] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

impl Rng {
    pub fn new(seed: u64) -> Rng {
        // Mix the seed so neighbouring seeds give unrelated streams.
        let mut r = Rng(seed ^ 0x243F_6A88_85A3_08D3);
        r.next_u64();
        r
    }

    /// A generator for one sub-stream (a table of a warehouse, a worker).
    pub fn derive(seed: u64, a: u64, b: u64) -> Rng {
        Rng::new(
            seed ^ a.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ b.wrapping_mul(0xC2B2_AE3D_27D4_EB4F),
        )
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0xA076_1D64_78BD_642F);
        let t = (self.0 as u128).wrapping_mul((self.0 ^ 0xE703_7ED1_A0B4_28DB) as u128);
        ((t >> 64) as u64) ^ (t as u64)
    }

    /// Uniform in `[lo, hi]` (the spec's "random within [x .. y]").
    pub fn uniform(&mut self, lo: u64, hi: u64) -> u64 {
        assert!(lo <= hi);
        let span = hi - lo + 1;
        lo + ((self.next_u64() as u128 * span as u128) >> 64) as u64
    }

    pub fn uniform_u32(&mut self, lo: u32, hi: u32) -> u32 {
        self.uniform(lo as u64, hi as u64) as u32
    }

    /// True with probability `p` (0..=1).
    pub fn chance(&mut self, p: f64) -> bool {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64) < p
    }

    /// NURand(A, x, y) of clause 2.1.6 with run-time constant `c`.
    pub fn nurand(&mut self, a: u32, x: u32, y: u32, c: u32) -> u32 {
        (((self.uniform_u32(0, a) | self.uniform_u32(x, y)) + c) % (y - x + 1)) + x
    }

    /// A random a-string (clause 4.3.2.2) of length within `[lo, hi]`,
    /// written to the front of `dst` (rest zero). Returns the length.
    pub fn astring(&mut self, dst: &mut [u8], lo: usize, hi: usize) -> usize {
        assert!(hi <= dst.len());
        let len = self.uniform(lo as u64, hi as u64) as usize;
        let mut bits = 0u64;
        let mut left = 0;
        let mut i = 0;
        while i < len {
            if left == 0 {
                bits = self.next_u64();
                left = 10;
            }
            // 6 bits per character; reject the two values past 61.
            let v = (bits & 63) as usize;
            bits >>= 6;
            left -= 1;
            if v < ALNUM.len() {
                dst[i] = ALNUM[v];
                i += 1;
            }
        }
        dst[len..].fill(0);
        len
    }

    /// A random n-string (digits) of exactly `dst.len()` characters.
    pub fn nstring(&mut self, dst: &mut [u8]) {
        for b in dst {
            *b = b'0' + self.uniform(0, 9) as u8;
        }
    }

    /// A zip code (clause 4.3.2.7): 4 random digits then "11111".
    pub fn zip(&mut self, dst: &mut [u8; 9]) {
        self.nstring(&mut dst[..4]);
        dst[4..].copy_from_slice(b"11111");
    }

    /// An a-string of `[lo, hi]` characters that, with probability 10%, holds
    /// "ORIGINAL" at a random position (I_DATA, S_DATA).
    pub fn data_with_original(&mut self, dst: &mut [u8], lo: usize, hi: usize) -> bool {
        let len = self.astring(dst, lo, hi);
        if self.uniform(1, 10) != 1 {
            return false;
        }
        let at = self.uniform(0, (len - 8) as u64) as usize;
        dst[at..at + 8].copy_from_slice(b"ORIGINAL");
        true
    }
}

const SYLLABLES: [&[u8]; 10] = [
    b"BAR", b"OUGHT", b"ABLE", b"PRI", b"PRES", b"ESE", b"ANTI", b"CALLY", b"ATION", b"EING",
];

/// C_LAST for `number` in 0..=999 (clause 4.3.2.3): three syllables chosen by
/// its digits. Returns the bytes written to the front of `dst` (rest zero).
pub fn last_name(number: u32, dst: &mut [u8; 16]) -> usize {
    assert!(number <= 999);
    let mut n = 0;
    for digit in [number / 100, (number / 10) % 10, number % 10] {
        let s = SYLLABLES[digit as usize];
        dst[n..n + s.len()].copy_from_slice(s);
        n += s.len();
    }
    dst[n..].fill(0);
    n
}

/// The run-time constants C of NURand (clause 2.1.6.1). C_LAST's run value
/// must differ from its load value by 65..=119, but not 96 or 112.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NurandConstants {
    pub c_last_load: u32,
    pub c_last_run: u32,
    pub c_id: u32,
    pub ol_i_id: u32,
}

impl NurandConstants {
    pub fn generate(rng: &mut Rng) -> NurandConstants {
        let c_last_load = rng.uniform_u32(0, 255);
        let c_last_run = loop {
            let candidate = rng.uniform_u32(0, 255);
            if Self::valid_delta(c_last_load, candidate) {
                break candidate;
            }
        };
        NurandConstants {
            c_last_load,
            c_last_run,
            c_id: rng.uniform_u32(0, 1023),
            ol_i_id: rng.uniform_u32(0, 8191),
        }
    }

    pub fn valid_delta(load: u32, run: u32) -> bool {
        let delta = load.abs_diff(run);
        (65..=119).contains(&delta) && delta != 96 && delta != 112
    }

    /// Whether values read back from pod memory are in range.
    pub fn is_valid(&self) -> bool {
        self.c_last_load <= 255
            && self.c_last_run <= 255
            && Self::valid_delta(self.c_last_load, self.c_last_run)
            && self.c_id <= 1023
            && self.ol_i_id <= 8191
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_stays_in_range_and_hits_both_ends() {
        let mut r = Rng::new(1);
        let (mut lo, mut hi) = (false, false);
        for _ in 0..10_000 {
            let v = r.uniform(5, 15);
            assert!((5..=15).contains(&v));
            lo |= v == 5;
            hi |= v == 15;
        }
        assert!(lo && hi);
    }

    #[test]
    fn nurand_stays_in_range() {
        let mut r = Rng::new(2);
        for _ in 0..10_000 {
            assert!((1..=3000).contains(&r.nurand(1023, 1, 3000, 259)));
            assert!(r.nurand(255, 0, 999, 17) <= 999);
        }
    }

    #[test]
    fn last_names_follow_the_syllables() {
        let mut buf = [0u8; 16];
        last_name(371, &mut buf);
        assert_eq!(super::super::schema::text(&buf), b"PRICALLYOUGHT");
        last_name(0, &mut buf);
        assert_eq!(super::super::schema::text(&buf), b"BARBARBAR");
        // The longest name fits the 16-byte column.
        assert_eq!(last_name(788, &mut buf), 15);
    }

    #[test]
    fn astrings_have_the_asked_length_and_alphabet() {
        let mut r = Rng::new(3);
        let mut buf = [0u8; 50];
        for _ in 0..1000 {
            let n = r.astring(&mut buf, 26, 50);
            assert!((26..=50).contains(&n));
            assert!(buf[..n].iter().all(u8::is_ascii_alphanumeric));
        }
    }

    #[test]
    fn c_last_run_constant_obeys_the_delta_rule() {
        for seed in 0..200 {
            let c = NurandConstants::generate(&mut Rng::new(seed));
            assert!(c.is_valid(), "{c:?}");
        }
        assert!(!NurandConstants::valid_delta(0, 96));
        assert!(!NurandConstants::valid_delta(200, 88));
        assert!(NurandConstants::valid_delta(10, 80));
    }
}
