#ifndef PIPELINEKIT_CCURL_SHIM_H
#define PIPELINEKIT_CCURL_SHIM_H
#include <curl/curl.h>

// curl_easy_setopt, curl_multi_setopt and curl_easy_getinfo are variadic, which Swift cannot call.
// These typed wrappers are the whole of the C we add.
static inline CURLcode pk_easy_setopt_long(CURL *h, CURLoption o, long v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode pk_easy_setopt_off(CURL *h, CURLoption o, curl_off_t v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode pk_easy_setopt_ptr(CURL *h, CURLoption o, void *v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode pk_easy_setopt_str(CURL *h, CURLoption o, const char *v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode pk_easy_setopt_slist(CURL *h, CURLoption o, struct curl_slist *v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode pk_easy_setopt_write(CURL *h, size_t (*f)(char *, size_t, size_t, void *)) { return curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, f); }
static inline CURLcode pk_easy_setopt_header(CURL *h, size_t (*f)(char *, size_t, size_t, void *)) { return curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, f); }
static inline CURLcode pk_easy_setopt_opensocket(CURL *h, curl_socket_t (*f)(void *, curlsocktype, struct curl_sockaddr *)) { return curl_easy_setopt(h, CURLOPT_OPENSOCKETFUNCTION, f); }
static inline CURLcode pk_easy_getinfo_long(CURL *h, CURLINFO i, long *v) { return curl_easy_getinfo(h, i, v); }
static inline CURLcode pk_easy_getinfo_off(CURL *h, CURLINFO i, curl_off_t *v) { return curl_easy_getinfo(h, i, v); }
static inline CURLcode pk_easy_getinfo_str(CURL *h, CURLINFO i, char **v) { return curl_easy_getinfo(h, i, v); }
static inline CURLcode pk_easy_getinfo_ptr(CURL *h, CURLINFO i, void **v) { return curl_easy_getinfo(h, i, v); }
static inline CURLMcode pk_multi_setopt_long(CURLM *m, CURLMoption o, long v) { return curl_multi_setopt(m, o, v); }
// CURLVERSION_NOW is a macro naming an enum case, which Swift does not import.
static inline curl_version_info_data *pk_curl_version_info(void) { return curl_version_info(CURLVERSION_NOW); }
#endif
