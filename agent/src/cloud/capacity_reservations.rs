//! The capacity reservations a NodeClass selects (`capacityReservationSelectorTerms`),
//! from `ec2:DescribeCapacityReservations`.
//!
//! Each term is one request: an `id` term asks for that reservation, any other term is a
//! set of filters (`tag:<key>`, `tag-key` for `*`, `owner-id`,
//! `instance-match-criteria`), always with `state=active`. The union is cached per
//! selection for the discovery TTL, and forgotten after every launch into a reservation
//! (or refusal by one): EC2's `AvailableInstanceCount` moves with every launch, and the
//! scheduler must not plan into places that are gone.
//!
//! An `id` EC2 does not know (`InvalidCapacityReservationId.NotFound`) selects nothing and
//! is logged: one stale ID must not take the class's market capacity down with it.

use std::collections::BTreeMap;

use aws_sdk_ec2::types::Filter;

use super::aws::CloudResultExt;
use super::ec2::Ec2Cloud;
use super::CloudError;
use crate::api::node_class::CapacityReservationSelectorTerm;
use crate::api::NodeClass;
use crate::catalog::reservations::ReservationRecord;

/// EC2's code for a reservation ID it does not know.
pub const NOT_FOUND: &str = "InvalidCapacityReservationId.NotFound";

/// The filters of a non-ID term.
pub fn term_filters(t: &CapacityReservationSelectorTerm) -> Vec<Filter> {
    let mut f = vec![Filter::builder().name("state").values("active").build()];
    for (k, v) in &t.tags {
        f.push(if v == "*" {
            Filter::builder().name("tag-key").values(k).build()
        } else {
            Filter::builder().name(format!("tag:{k}")).values(v).build()
        });
    }
    if let Some(o) = &t.owner_id {
        f.push(Filter::builder().name("owner-id").values(o).build());
    }
    if let Some(m) = &t.instance_match_criteria {
        f.push(
            Filter::builder()
                .name("instance-match-criteria")
                .values(m)
                .build(),
        );
    }
    f
}

impl Ec2Cloud {
    /// The active reservations `class` selects (none when it has no terms).
    pub(crate) async fn reservations_for(
        &self,
        class: &NodeClass,
    ) -> Result<Vec<ReservationRecord>, CloudError> {
        let terms = &class.spec.capacity_reservation_selector_terms;
        if terms.is_empty() {
            return Ok(Vec::new());
        }
        let key = serde_json::to_string(terms).unwrap_or_default();
        if let Some(v) = self.fresh(&self.reservations, &key) {
            return Ok(v);
        }
        let mut found: BTreeMap<String, ReservationRecord> = BTreeMap::new();
        for t in terms {
            let got = match &t.id {
                Some(id) => match self.describe_reservations(Some(id), Vec::new()).await {
                    Err(e) if e.code == NOT_FOUND => {
                        tracing::warn!(nodeclass = %class.metadata.name.as_deref().unwrap_or(""), reservation = %id, error = %e, "capacity reservation not found; the term selects nothing");
                        Vec::new()
                    }
                    other => other?,
                },
                None => self.describe_reservations(None, term_filters(t)).await?,
            };
            for r in got {
                found.insert(r.id.clone(), r);
            }
        }
        let v: Vec<ReservationRecord> = found.into_values().collect();
        self.remember(&self.reservations, &key, v.clone());
        Ok(v)
    }

    /// Reservations by ID, as EC2 reports them now; IDs it no longer knows are left out.
    pub(crate) async fn reservations_by_id(
        &self,
        ids: &[String],
    ) -> Result<Vec<ReservationRecord>, CloudError> {
        let mut out = Vec::new();
        for id in ids {
            match self.describe_reservations(Some(id), Vec::new()).await {
                Ok(v) => out.extend(v),
                Err(e) if e.code == NOT_FOUND => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// Forgets what reservations held (a launch went into one, or one refused a launch).
    pub(crate) fn forget_reservations(&self) {
        self.reservations
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    async fn describe_reservations(
        &self,
        id: Option<&str>,
        filters: Vec<Filter>,
    ) -> Result<Vec<ReservationRecord>, CloudError> {
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut req = self
                .ec2
                .describe_capacity_reservations()
                .set_filters(Some(filters.clone()))
                .set_next_token(token.clone());
            req = match id {
                Some(id) => req.capacity_reservation_ids(id),
                None => req.max_results(1000),
            };
            let page = req.send().await.cloud("ec2:DescribeCapacityReservations")?;
            out.extend(
                page.capacity_reservations()
                    .iter()
                    .filter_map(ReservationRecord::from_ec2),
            );
            token = page
                .next_token()
                .map(str::to_string)
                .filter(|t| !t.is_empty());
            if token.is_none() {
                return Ok(out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_term_is_a_set_of_filters_on_active_reservations() {
        let t = CapacityReservationSelectorTerm {
            tags: [
                ("team".to_string(), "ml".to_string()),
                ("any".to_string(), "*".to_string()),
            ]
            .into(),
            owner_id: Some("123456789012".into()),
            instance_match_criteria: Some("targeted".into()),
            id: None,
        };
        let got: Vec<(String, Vec<String>)> = term_filters(&t)
            .iter()
            .map(|f| (f.name().unwrap().to_string(), f.values().to_vec()))
            .collect();
        assert_eq!(
            got,
            [
                ("state".to_string(), vec!["active".to_string()]),
                ("tag-key".to_string(), vec!["any".to_string()]),
                ("tag:team".to_string(), vec!["ml".to_string()]),
                ("owner-id".to_string(), vec!["123456789012".to_string()]),
                (
                    "instance-match-criteria".to_string(),
                    vec!["targeted".to_string()]
                ),
            ]
        );
    }
}
