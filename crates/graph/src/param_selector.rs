//! Choosing parameters by name or shape: which ones an optimizer's parameter group holds
//! ([`ParamGroup`](crate::nodes::optim::ParamGroup)) and which ones are frozen
//! ([`GraphBuilder::freeze`](crate::GraphBuilder::freeze)).

/// A set of parameters, by name or shape.
///
/// # Examples
///
/// ```
/// use wick_graph::ParamSelector;
///
/// // A fine-tuning's frozen backbone: everything but the classifier.
/// let backbone = !ParamSelector::InLayer("fc".into());
/// assert!(backbone.selects("layer1.0.conv1.weight", &[64, 64, 3, 3]));
/// assert!(!backbone.selects("fc.weight", &[10, 512]));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParamSelector {
    /// Every parameter with at most one dimension: biases and normalisation weights (the
    /// usual "no weight decay" group).
    OneDimensional,
    /// Parameters whose name ends with this suffix (`".bias"`).
    NameEndsWith(String),
    /// Parameters in this layer or below it (`"features.0"`).
    InLayer(String),
    /// Every parameter.
    All,
    /// The parameters the inner selector does not select.
    Not(Box<ParamSelector>),
    /// The parameters any of these selects.
    AnyOf(Vec<ParamSelector>),
}

impl ParamSelector {
    /// Whether the parameter `name` of shape `shape` is selected.
    pub fn selects(&self, name: &str, shape: &[usize]) -> bool {
        match self {
            ParamSelector::OneDimensional => shape.len() <= 1,
            ParamSelector::NameEndsWith(s) => name.ends_with(s.as_str()),
            ParamSelector::InLayer(l) => name
                .strip_prefix(l.as_str())
                .is_some_and(|rest| rest.starts_with('.')),
            ParamSelector::All => true,
            ParamSelector::Not(inner) => !inner.selects(name, shape),
            ParamSelector::AnyOf(all) => all.iter().any(|s| s.selects(name, shape)),
        }
    }
}

impl std::ops::Not for ParamSelector {
    type Output = ParamSelector;

    /// The parameters this selector does not select.
    fn not(self) -> ParamSelector {
        ParamSelector::Not(Box::new(self))
    }
}
