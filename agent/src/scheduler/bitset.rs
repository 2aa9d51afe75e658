//! A fixed-size bit set over instance type indexes: intersecting "types this NodePool
//! allows" with "types this pod allows" is a few word ANDs instead of a rescan.

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Bitset {
    words: Vec<u64>,
}

impl Bitset {
    pub fn empty(n: usize) -> Bitset {
        Bitset {
            words: vec![0; n.div_ceil(64)],
        }
    }

    pub fn set(&mut self, i: usize) {
        self.words[i / 64] |= 1 << (i % 64);
    }

    pub fn get(&self, i: usize) -> bool {
        self.words[i / 64] & (1 << (i % 64)) != 0
    }

    pub fn and(&self, other: &Bitset) -> Bitset {
        Bitset {
            words: self
                .words
                .iter()
                .zip(&other.words)
                .map(|(a, b)| a & b)
                .collect(),
        }
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|w| *w == 0)
    }

    #[cfg(test)]
    pub fn count(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Set indexes in increasing order.
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.words.iter().enumerate().flat_map(|(wi, w)| {
            let mut w = *w;
            std::iter::from_fn(move || {
                if w == 0 {
                    return None;
                }
                let b = w.trailing_zeros() as usize;
                w &= w - 1;
                Some(wi * 64 + b)
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_iterate_intersect() {
        let mut a = Bitset::empty(130);
        let mut b = Bitset::empty(130);
        for i in [0, 63, 64, 129] {
            a.set(i);
        }
        b.set(64);
        b.set(5);
        assert_eq!(a.iter().collect::<Vec<_>>(), [0, 63, 64, 129]);
        assert_eq!(a.and(&b).iter().collect::<Vec<_>>(), [64]);
        assert_eq!(a.count(), 4);
        assert!(Bitset::empty(3).is_empty());
        assert!(a.get(129) && !a.get(128));
    }
}
