//! Layer groups: the tensors whose names differ only in their layer
//! numbers (`model.layers.0.mlp.down_proj.weight`, `model.layers.1...`)
//! summarized together as `model.layers.*.mlp.down_proj.weight`.

use std::collections::BTreeMap;

/// A name's pattern (every all-digit component `*`) and its layer: the
/// first such component's number. `None` for a name with no number.
pub(crate) fn layer_pattern(name: &str) -> Option<(String, u64)> {
    let mut layer = None;
    let parts: Vec<&str> = name
        .split('.')
        .map(|p| {
            if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) {
                if layer.is_none() {
                    layer = Some(p.parse::<u64>().unwrap_or(u64::MAX));
                }
                "*"
            } else {
                p
            }
        })
        .collect();
    layer.map(|l| (parts.join("."), l))
}

/// Groups of at least two tensors sharing a pattern: `(pattern, [(layer,
/// index into names)])`, members by layer then name, groups by pattern.
pub(crate) fn layer_groups<'n>(
    names: impl IntoIterator<Item = &'n str>,
) -> Vec<(String, Vec<(u64, usize)>)> {
    let mut groups: BTreeMap<String, Vec<(u64, usize)>> = BTreeMap::new();
    for (i, name) in names.into_iter().enumerate() {
        if let Some((pattern, layer)) = layer_pattern(name) {
            groups.entry(pattern).or_default().push((layer, i));
        }
    }
    groups
        .into_iter()
        .filter(|(_, m)| m.len() >= 2)
        .map(|(p, mut m)| {
            m.sort();
            (p, m)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layers_group_by_pattern() {
        assert_eq!(
            layer_pattern("model.layers.12.mlp.experts.3.w1"),
            Some(("model.layers.*.mlp.experts.*.w1".into(), 12))
        );
        assert_eq!(layer_pattern("lm_head.weight"), None);
        let names = [
            "model.layers.10.mlp.down_proj.weight",
            "model.layers.2.mlp.down_proj.weight",
            "model.norm.weight",
            "model.layers.2.input_layernorm.weight",
        ];
        let g = layer_groups(names);
        assert_eq!(g.len(), 1);
        assert_eq!(g[0].0, "model.layers.*.mlp.down_proj.weight");
        assert_eq!(g[0].1, [(2, 1), (10, 0)]);
    }
}
