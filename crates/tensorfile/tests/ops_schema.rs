#[test]
fn hash_json_has_the_keys_its_page_lists() {
    use tensorfile::ops::hash::{hash, HashRequest};
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("model");
    std::fs::create_dir(&model).unwrap();
    write_f32s(&model.join("model.safetensors"), &[("w", &[1.0, 2.0])], &[]);
    // An invalid `*.safetensors` file: `invalid` says why.
    std::fs::write(model.join("bad.safetensors"), b"not a safetensors file").unwrap();
    let mut request = HashRequest::new([&model]);
    request.per_tensor = true;
    request.write_manifest = Some(dir.path().join("m.json"));
    let report = hash(&request, &()).unwrap();
    assert!(report.any_invalid());
    assert!(dir.path().join("m.json").is_file());
    assert_eq!(documented("hash"), printed_paths(&report));
}

#[test]
fn a_manifest_of_two_inputs_is_a_refused_request() {
    use tensorfile::ops::hash::{hash, HashRequest};
    let file = fixtures().join("valid/minimal_bf16.safetensors");
    let mut request = HashRequest::new([&file, &file]);
    request.write_manifest = Some("m.json".into());
    let err = hash(&request, &()).unwrap_err();
    assert!(matches!(err, tensorfile::Error::Request { .. }), "{err}");
}

#[test]
fn verify_json_has_the_keys_its_page_lists() {
    use tensorfile::ops::hash::{hash, HashRequest};
    use tensorfile::ops::verify::{verify, VerifyRequest};
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("model");
    std::fs::create_dir(&model).unwrap();
    write_f32s(&model.join("a.safetensors"), &[("w", &[1.0, 2.0])], &[]);
    write_f32s(&model.join("b.safetensors"), &[("w", &[3.0])], &[]);
    let manifest = dir.path().join("m.json");
    let mut request = HashRequest::new([&model]);
    request.write_manifest = Some(manifest.clone());
    hash(&request, &()).unwrap();
    // One file changed, one gone, one new.
    write_f32s(&model.join("a.safetensors"), &[("w", &[1.0, 5.0])], &[]);
    std::fs::remove_file(model.join("b.safetensors")).unwrap();
    std::fs::write(model.join("c.txt"), b"new").unwrap();
    let mut request = VerifyRequest::new(&model);
    request.manifest = Some(manifest);
    let report = verify(&request, &()).unwrap();
    assert_eq!(report.verdict, "mismatch");
    assert!(!report.passed());
    assert_eq!(documented("verify"), printed_paths(&report));
}

#[test]
fn verify_refuses_a_sha256_that_is_not_one() {
    use tensorfile::ops::verify::{verify, VerifyRequest};
    let mut request = VerifyRequest::new(fixtures().join("valid/minimal_bf16.safetensors"));
    request.sha256 = Some("abc".into());
    let err = verify(&request, &()).unwrap_err();
    assert!(matches!(err, tensorfile::Error::Request { .. }), "{err}");
}
