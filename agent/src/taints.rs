//! Taints and tolerations, with the matching rules of the Kubernetes scheduler.

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Effect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
}

impl Effect {
    pub fn parse(s: &str) -> Result<Effect, String> {
        match s {
            "NoSchedule" => Ok(Effect::NoSchedule),
            "PreferNoSchedule" => Ok(Effect::PreferNoSchedule),
            "NoExecute" => Ok(Effect::NoExecute),
            _ => Err("must be one of NoSchedule, PreferNoSchedule, NoExecute".into()),
        }
    }

    pub fn as_str(&self) -> &'static str {
        match self {
            Effect::NoSchedule => "NoSchedule",
            Effect::PreferNoSchedule => "PreferNoSchedule",
            Effect::NoExecute => "NoExecute",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Taint {
    pub key: String,
    pub value: String,
    pub effect: Effect,
}

impl Taint {
    pub fn new(key: &str, value: &str, effect: Effect) -> Taint {
        Taint {
            key: key.into(),
            value: value.into(),
            effect,
        }
    }
}

impl fmt::Display for Taint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.value.is_empty() {
            write!(f, "{}:{}", self.key, self.effect.as_str())
        } else {
            write!(f, "{}={}:{}", self.key, self.value, self.effect.as_str())
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Toleration {
    /// Empty key with operator Exists tolerates every taint.
    pub key: String,
    /// `Exists` when true, `Equal` otherwise.
    pub exists: bool,
    pub value: String,
    /// None tolerates every effect.
    pub effect: Option<Effect>,
}

impl Toleration {
    pub fn equal(key: &str, value: &str, effect: Option<Effect>) -> Toleration {
        Toleration {
            key: key.into(),
            exists: false,
            value: value.into(),
            effect,
        }
    }

    pub fn exists(key: &str, effect: Option<Effect>) -> Toleration {
        Toleration {
            key: key.into(),
            exists: true,
            value: String::new(),
            effect,
        }
    }

    pub fn tolerates(&self, t: &Taint) -> bool {
        if self.effect.is_some_and(|e| e != t.effect) {
            return false;
        }
        if self.key.is_empty() {
            return self.exists;
        }
        self.key == t.key && (self.exists || self.value == t.value)
    }
}

/// The first taint that repels a pod with these tolerations. `PreferNoSchedule` never
/// repels: the scheduler only avoids such nodes when it can.
pub fn first_untolerated<'a>(taints: &'a [Taint], tolerations: &[Toleration]) -> Option<&'a Taint> {
    taints.iter().find(|t| {
        t.effect != Effect::PreferNoSchedule && !tolerations.iter().any(|tol| tol.tolerates(t))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matching() {
        let t = Taint::new("gpu", "true", Effect::NoSchedule);
        assert!(Toleration::equal("gpu", "true", None).tolerates(&t));
        assert!(!Toleration::equal("gpu", "false", None).tolerates(&t));
        assert!(Toleration::exists("gpu", Some(Effect::NoSchedule)).tolerates(&t));
        assert!(!Toleration::exists("gpu", Some(Effect::NoExecute)).tolerates(&t));
        assert!(Toleration::exists("", None).tolerates(&t));
        let soft = Taint::new("x", "", Effect::PreferNoSchedule);
        assert!(first_untolerated(std::slice::from_ref(&soft), &[]).is_none());
        assert_eq!(first_untolerated(&[soft, t.clone()], &[]), Some(&t));
    }
}
