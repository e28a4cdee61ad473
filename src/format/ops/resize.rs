//! Records of the resize family: Resize.

use super::{AttrsIn, AttrsOut};
use crate::ir::{CoordMode, NearestMode, Op, ResizeMode};

const MODES: &[(ResizeMode, &str)] = &[
    (ResizeMode::Nearest, "nearest"),
    (ResizeMode::Linear, "linear"),
    (ResizeMode::Cubic, "cubic"),
];

const COORDS: &[(CoordMode, &str)] = &[
    (CoordMode::HalfPixel, "half_pixel"),
    (CoordMode::PytorchHalfPixel, "pytorch_half_pixel"),
    (CoordMode::AlignCorners, "align_corners"),
    (CoordMode::Asymmetric, "asymmetric"),
    (CoordMode::TfCropAndResize, "tf_crop_and_resize"),
    (CoordMode::HalfPixelSymmetric, "half_pixel_symmetric"),
];

const NEAREST: &[(NearestMode, &str)] = &[
    (NearestMode::RoundPreferFloor, "round_prefer_floor"),
    (NearestMode::RoundPreferCeil, "round_prefer_ceil"),
    (NearestMode::Floor, "floor"),
    (NearestMode::Ceil, "ceil"),
];

fn name_of<T: PartialEq>(table: &[(T, &'static str)], v: &T) -> Option<&'static str> {
    table.iter().find(|(t, _)| t == v).map(|(_, n)| *n)
}

fn value_of<T: Copy>(table: &[(T, &str)], a: &AttrsIn, attr: &str) -> Result<T, String> {
    let s = a.string(attr)?;
    table
        .iter()
        .find(|(_, n)| *n == s)
        .map(|(t, _)| *t)
        .ok_or_else(|| format!("Resize: unknown {attr} '{s}'"))
}

pub(super) fn encode(op: &Op, a: &mut AttrsOut) -> Option<&'static str> {
    let Op::Resize {
        mode,
        coord,
        nearest,
        cubic_coeff_a,
        exclude_outside,
        extrapolation_value,
    } = op
    else {
        return None;
    };
    a.string("mode", name_of(MODES, mode)?);
    a.string("coordinate_transformation_mode", name_of(COORDS, coord)?);
    a.string("nearest_mode", name_of(NEAREST, nearest)?);
    a.float("cubic_coeff_a", *cubic_coeff_a);
    a.bool("exclude_outside", *exclude_outside);
    a.float("extrapolation_value", *extrapolation_value);
    Some("Resize")
}

pub(super) fn decode(name: &str, a: &AttrsIn) -> Option<Result<Op, String>> {
    let f = || -> Result<Op, String> {
        Ok(Op::Resize {
            mode: value_of(MODES, a, "mode")?,
            coord: value_of(COORDS, a, "coordinate_transformation_mode")?,
            nearest: value_of(NEAREST, a, "nearest_mode")?,
            cubic_coeff_a: a.float("cubic_coeff_a")?,
            exclude_outside: a.bool("exclude_outside")?,
            extrapolation_value: a.float("extrapolation_value")?,
        })
    };
    (name == "Resize").then(f)
}
