//! The zip format's record signatures and fixed lengths.

pub(crate) const EOCD_SIG: u32 = 0x0605_4b50;
pub(crate) const EOCD_LEN: usize = 22;
pub(crate) const ZIP64_LOCATOR_SIG: u32 = 0x0706_4b50;
pub(crate) const ZIP64_LOCATOR_LEN: usize = 20;
pub(crate) const ZIP64_EOCD_SIG: u32 = 0x0606_4b50;
pub(crate) const ZIP64_EOCD_LEN: usize = 56;
pub(crate) const CENTRAL_SIG: u32 = 0x0201_4b50;
pub(crate) const CENTRAL_LEN: usize = 46;
pub(crate) const LOCAL_SIG: u32 = 0x0403_4b50;
pub(crate) const LOCAL_LEN: usize = 30;
pub(crate) const ZIP64_EXTRA_ID: u16 = 0x0001;
