// Extended attributes (getxattr, setxattr), which Swift's Glibc module does not export: the
// local destination records each output's fingerprint in one.
#include <sys/xattr.h>
