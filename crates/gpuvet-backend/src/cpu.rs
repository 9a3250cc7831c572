//! placeholder: the cpu backend
