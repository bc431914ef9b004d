// libxml2's reader, for XMP packets. Debian builds libxml2 with ICU, and its encoding header
// would then bring ICU's declarations, which clash with the copy of ICU that Foundation carries:
// nothing here uses encoding handlers (whose layout that changes), so ICU is left out.
#include <libxml/xmlversion.h>
#undef LIBXML_ICU_ENABLED
#include <libxml/xmlreader.h>
#include <libxml/parser.h>
