//! Post-training quantisation (PTQ): calibration data loading ([`data`]), the `.npy`
//! reader ([`npy`]) and calibration images ([`image`]).

pub mod data;
pub mod image;
pub mod npy;

pub use data::{calib_inputs, load_samples, CalibInput, Sample};
