use super::*;
use crate::quant::npy::encode_npy;

fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("vnpu_qdata_{tag}_{}", std::process::id()));
    std::fs::remove_dir_all(&d).ok();
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn input(name: &str, shape: &[usize]) -> CalibInput {
    CalibInput {
        name: name.into(),
        dtype: DType::F32,
        shape: shape.to_vec(),
        image: None,
    }
}

fn write(path: &Path, t: &Tensor) {
    std::fs::write(path, encode_npy(t)).unwrap();
}

#[test]
fn one_input_samples_load_in_order_with_or_without_batch() {
    let d = tmpdir("one");
    write(
        &d.join("001.npy"),
        &Tensor::from_f32(vec![1, 2], vec![1.0, 2.0]),
    );
    write(
        &d.join("000.npy"),
        &Tensor::from_f32(vec![2], vec![3.0, 4.0]),
    );
    let s = load_samples(&d, &[input("x", &[1, 2])]).unwrap();
    assert_eq!(s.len(), 2);
    assert_eq!(s[0].name, "000");
    assert_eq!(s[0].inputs[0].shape, vec![1, 2]);
    assert_eq!(s[0].inputs[0].to_f32_vec(), vec![3.0, 4.0]);
    assert_eq!(s[1].inputs[0].to_f32_vec(), vec![1.0, 2.0]);
    std::fs::remove_dir_all(&d).ok();
}

#[test]
fn several_inputs_use_subfolders_matched_by_stem() {
    let d = tmpdir("multi");
    for n in ["a", "b"] {
        std::fs::create_dir_all(d.join(n)).unwrap();
        for k in 0..3 {
            write(
                &d.join(n).join(format!("{k:03}.npy")),
                &Tensor::from_f32(vec![1, 1], vec![k as f32]),
            );
        }
    }
    let ins = [input("a", &[1, 1]), input("b", &[1, 1])];
    let s = load_samples(&d, &ins).unwrap();
    assert_eq!(s.len(), 3);
    assert_eq!(s[2].inputs[1].to_f32_vec(), vec![2.0]);
    std::fs::remove_file(d.join("b").join("001.npy")).unwrap();
    let e = load_samples(&d, &ins).unwrap_err().to_string();
    assert!(e.contains("'001'") && e.contains("'b'"), "{e}");
    std::fs::remove_dir_all(&d).ok();
}

#[test]
fn errors_name_the_problem() {
    let d = tmpdir("err");
    let e = load_samples(&d, &[input("x", &[1, 2])])
        .unwrap_err()
        .to_string();
    assert!(e.contains("no calibration samples"), "{e}");
    write(
        &d.join("000.npy"),
        &Tensor::from_f32(vec![1, 3], vec![0.0; 3]),
    );
    let e = load_samples(&d, &[input("x", &[1, 2])])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("000.npy") && e.contains("1x2") && e.contains("1x3"),
        "{e}"
    );
    std::fs::remove_file(d.join("000.npy")).unwrap();
    std::fs::write(d.join("notes.txt"), b"hi").unwrap();
    let e = load_samples(&d, &[input("x", &[1, 2])])
        .unwrap_err()
        .to_string();
    assert!(e.contains("notes.txt") && e.contains(".npy"), "{e}");
    std::fs::remove_file(d.join("notes.txt")).unwrap();
    std::fs::write(d.join("p.png"), b"x").unwrap();
    let e = load_samples(&d, &[input("x", &[1, 3, 2, 2])])
        .unwrap_err()
        .to_string();
    assert!(e.contains("p.png") && e.contains("input_type_rt"), "{e}");
    let e = load_samples(&d.join("missing"), &[input("x", &[1])])
        .unwrap_err()
        .to_string();
    assert!(e.contains("not a directory"), "{e}");
    std::fs::remove_dir_all(&d).ok();
}

#[test]
fn raw_image_bytes_go_through_the_model_preprocessing() {
    let d = tmpdir("img");
    let raw = Tensor::from_le_bytes(DType::U8, vec![1, 3, 1, 2], &[10, 20, 30, 40, 50, 60]);
    write(&d.join("000.npy"), &raw);
    let inp = CalibInput {
        name: "img".into(),
        dtype: DType::F32,
        shape: vec![1, 3, 1, 2],
        image: Some(InputParams {
            name: "img".into(),
            shape: None,
            input_type: InputType::Image(ImageFormat::Rgb),
            nhwc: false,
            train_bgr: false,
            mean: vec![10.0, 10.0, 10.0],
            scale: vec![0.5, 0.5, 0.5],
        }),
    };
    let s = load_samples(&d, &[inp]).unwrap();
    assert_eq!(
        s[0].inputs[0].to_f32_vec(),
        vec![0.0, 5.0, 10.0, 15.0, 20.0, 25.0]
    );
    std::fs::remove_dir_all(&d).ok();
}
