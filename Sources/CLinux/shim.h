// Linux calls that Swift's Glibc module does not export: extended attributes (getxattr,
// setxattr), where the local destination records each output's fingerprint, and mallinfo2,
// with which the tests count heap bytes in use.
#include <sys/xattr.h>
#include <malloc.h>
