//! placeholder: the sim backend
