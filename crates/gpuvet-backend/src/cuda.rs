//! placeholder: the cuda backend
