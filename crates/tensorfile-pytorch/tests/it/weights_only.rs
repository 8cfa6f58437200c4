//! The pickle rule against torch's verdicts: `tests/fixtures/pytorch/
//! weights_only.json` records what `torch.load(weights_only=True)` (torch
//! 2.15) did with every checkpoint fixture (scripts/check_pickle_rule.py
//! wrote it, and checks the same against torch itself). Every file torch
//! refuses is refused here; none torch accepts is refused by the pickle rule
//! (an opcode torch refuses, or a global off the allow-list for no stated
//! reason), though what safetensors cannot hold (sparse, quantized, complex
//! tensors) may still be refused.

use tensorfile_pytorch::{Checkpoint, Error, PickleErrorKind};

/// Whether `e` is a refusal by the pickle rule itself.
fn by_the_rule(e: &Error) -> bool {
    matches!(
        e,
        Error::Pickle { source, .. }
            if matches!(
                source.kind,
                PickleErrorKind::Refused { .. } | PickleErrorKind::ForbiddenGlobal { hint: None, .. }
            )
    )
}

#[test]
fn tensorfile_refuses_whatever_torch_refuses_and_the_rule_nothing_it_accepts() {
    let root = tensorfile_testkit::fixtures().join("../..");
    let text = std::fs::read_to_string(tensorfile_testkit::fixture("pytorch/weights_only.json"))
        .expect("tests/fixtures/pytorch/weights_only.json");
    let verdicts: serde_json::Value = serde_json::from_str(&text).unwrap();
    let files = verdicts["files"].as_object().unwrap();
    let (mut refused, mut accepted) = (0, 0);
    for (file, verdict) in files {
        let got = Checkpoint::open(root.join(file));
        match verdict["torch"].as_str().unwrap() {
            "refused" => {
                refused += 1;
                assert!(
                    got.is_err(),
                    "{file}: torch refuses it ({}), tensorfile accepts it",
                    verdict["torch_error"]
                );
            }
            "ok" => {
                accepted += 1;
                if let Err(e) = got {
                    assert!(
                        !by_the_rule(&e),
                        "{file}: torch accepts it, the rule refuses: {e}"
                    );
                }
            }
            other => panic!("{file}: verdict {other:?}"),
        }
    }
    // The real checkpoints (tests/fixtures/real) are among those accepted.
    assert!(files.keys().any(|f| f.starts_with("tests/fixtures/real/")));
    assert!(
        refused >= 20 && accepted >= 30,
        "{refused} refused, {accepted} accepted"
    );
}
