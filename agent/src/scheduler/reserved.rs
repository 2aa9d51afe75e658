//! Capacity reservations during one round: how many more instances each takes, and which
//! claim holds which.
//!
//! A reservation is a bounded offering (Karpenter's ODCR design: "the scheduler could count
//! the number of simulated NodeClaims that might use the offering"). When a claim opens and
//! a reservation of its pool's NodeClass has room for what it holds, the claim takes one
//! place in it (a [`Hold`]): its target is the reservation's type, its zone the
//! reservation's, its capacity type `reserved`. Such a claim stays reserved: when its pods
//! outgrow the type it moves to a larger reservation or takes no more pods, so the
//! reservation is filled before the market is paid (Karpenter: "rather than scheduling this
//! pod to the same node, we will create a new node, retaining the reserved offering").
//! A claim whose target moves releases its place. The count never goes below zero, so a
//! round never plans more launches into a reservation than it has room for.

use std::collections::HashMap;

use crate::catalog::Catalog;

/// One reserved offering a pool may launch into: the offering's index in its type's
/// offerings, the reservation's index in the round's [`Ledger`], and the zone's bit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ResOffer {
    pub offering: usize,
    pub res: usize,
    pub zone: usize,
}

/// A claim's place in a reservation: the type it launches and the offering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Hold {
    pub t: usize,
    pub offer: ResOffer,
}

/// Reservations of the round, by index, with what is left in each.
#[derive(Debug, Default, Clone)]
pub(crate) struct Ledger {
    ids: Vec<String>,
    index: HashMap<String, usize>,
    left: Vec<u32>,
}

impl Ledger {
    /// Every reservation in `catalog` (several classes may select the same one: it counts
    /// once).
    pub fn from_catalog(catalog: &Catalog) -> Ledger {
        let mut l = Ledger::default();
        for t in &catalog.types {
            for o in &t.offerings {
                let Some(r) = &o.reservation else { continue };
                match l.index.get(&r.id) {
                    Some(&i) => l.left[i] = l.left[i].max(r.available),
                    None => {
                        l.index.insert(r.id.clone(), l.ids.len());
                        l.ids.push(r.id.clone());
                        l.left.push(r.available);
                    }
                }
            }
        }
        l
    }

    pub fn index(&self, id: &str) -> Option<usize> {
        self.index.get(id).copied()
    }

    /// Places left in reservation `res`, counting `own`'s place as free (a claim re-choosing
    /// its target may keep the place it holds).
    pub fn left(&self, res: usize, own: Option<Hold>) -> u32 {
        self.left[res] + u32::from(own.is_some_and(|h| h.offer.res == res))
    }

    /// Moves a claim's place from `old` to `new`.
    pub fn transfer(&mut self, old: Option<Hold>, new: Option<Hold>) {
        if old.map(|h| h.offer.res) == new.map(|h| h.offer.res) {
            return;
        }
        if let Some(h) = old {
            self.left[h.offer.res] += 1;
        }
        if let Some(h) = new {
            self.left[h.offer.res] = self.left[h.offer.res].saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_move_with_the_claim_and_never_go_negative() {
        let mut l = Ledger {
            ids: vec!["cr-a".into(), "cr-b".into()],
            index: [("cr-a".to_string(), 0), ("cr-b".to_string(), 1)].into(),
            left: vec![1, 1],
        };
        let a = Hold {
            t: 0,
            offer: ResOffer {
                offering: 0,
                res: 0,
                zone: 0,
            },
        };
        let b = Hold {
            t: 1,
            offer: ResOffer {
                offering: 0,
                res: 1,
                zone: 0,
            },
        };
        l.transfer(None, Some(a));
        assert_eq!(l.left(0, None), 0);
        assert_eq!(
            l.left(0, Some(a)),
            1,
            "its own place counts as free to its holder"
        );
        l.transfer(Some(a), Some(a));
        assert_eq!(l.left(0, None), 0);
        l.transfer(Some(a), Some(b));
        assert_eq!((l.left(0, None), l.left(1, None)), (1, 0));
        l.transfer(Some(b), None);
        assert_eq!(l.left(1, None), 1);
        assert_eq!(l.index("cr-b"), Some(1));
    }
}
