//! A profile's JSON: the result model with its per-layer, per-block and per-stage views,
//! and reading it back.

use serde::Serialize;

use crate::profile::data::{OpTypeRow, Profile};
use crate::profile::layers::{LayerLevel, LayerRow};
use crate::profile::samples::SCHEMA;

impl Profile {
    /// A profile read back from [`to_json`](Profile::to_json)'s text. Refuses another
    /// schema, and times or samples that are not what a profile holds
    /// ([`validate`](Profile::validate)).
    pub fn from_json(text: &str) -> Result<Profile, String> {
        let p: Profile =
            serde_json::from_str(text).map_err(|e| format!("not a wick profile: {e}"))?;
        if p.schema != SCHEMA {
            return Err(format!(
                "profile schema {:?}, this wick reads {:?}",
                p.schema, SCHEMA
            ));
        }
        p.validate()?;
        Ok(p)
    }

    /// The whole profile as JSON, with the per-layer, per-block and per-stage views
    /// (every row, not only the text report's top ones).
    pub fn to_json(&self) -> String {
        #[derive(Serialize)]
        struct WithViews<'a> {
            #[serde(flatten)]
            profile: &'a Profile,
            by_type_and_shape: Vec<OpTypeRow>,
            layers: Vec<LayerRow>,
            blocks: Vec<LayerRow>,
            stages: Vec<LayerRow>,
        }
        let views = WithViews {
            profile: self,
            by_type_and_shape: self.by_type_and_shape(),
            layers: self.by_layer(LayerLevel::Layer),
            blocks: self.by_layer(LayerLevel::Block),
            stages: self.by_layer(LayerLevel::Stage),
        };
        serde_json::to_string_pretty(&views).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }
}
