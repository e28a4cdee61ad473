//! Post-training quantisation (PTQ): calibration data loading ([`data`]), the `.npy`
//! reader ([`npy`]) and calibration images ([`image`]); quantised model inputs and
//! outputs at the API boundary ([`io`]).

pub mod data;
pub mod image;
pub mod io;
pub mod io_calib;
pub mod npy;

pub use data::{calib_inputs, load_samples, CalibInput, Sample};
