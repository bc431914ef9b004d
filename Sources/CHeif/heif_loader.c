// libheif through dlopen: see include/CHeif.h.
#include "CHeif.h"
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#define PK_HEIF_FUNCTIONS(X) \
    X(heif_get_version) \
    X(heif_context_alloc) \
    X(heif_context_free) \
    X(heif_context_set_max_decoding_threads) \
    X(heif_context_read_from_memory_without_copy) \
    X(heif_context_get_primary_image_handle) \
    X(heif_image_handle_release) \
    X(heif_image_handle_get_width) \
    X(heif_image_handle_get_height) \
    X(heif_image_handle_get_color_profile_type) \
    X(heif_image_handle_get_raw_color_profile_size) \
    X(heif_image_handle_get_raw_color_profile) \
    X(heif_image_handle_has_alpha_channel) \
    X(heif_image_handle_is_premultiplied_alpha) \
    X(heif_image_handle_get_number_of_metadata_blocks) \
    X(heif_image_handle_get_list_of_metadata_block_IDs) \
    X(heif_image_handle_get_metadata_content_type) \
    X(heif_image_handle_get_metadata_size) \
    X(heif_image_handle_get_metadata) \
    X(heif_decode_image) \
    X(heif_image_release) \
    X(heif_image_get_width) \
    X(heif_image_get_height) \
    X(heif_image_get_plane_readonly) \
    X(heif_image_get_bits_per_pixel_range)

static struct {
#define PK_HEIF_FIELD(name) __typeof__(&name) name;
    PK_HEIF_FUNCTIONS(PK_HEIF_FIELD)
#undef PK_HEIF_FIELD
    int loaded;
    char error[256];
} api;

static pthread_once_t once = PTHREAD_ONCE_INIT;

static void open_libheif(void) {
    void *library = dlopen("libheif.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!library) {
        const char *why = dlerror();
        snprintf(api.error, sizeof api.error, "libheif could not be loaded: %s", why ? why : "unknown reason");
        return;
    }
#define PK_HEIF_BIND(name) \
    api.name = (__typeof__(&name))dlsym(library, #name); \
    if (!api.name) { \
        snprintf(api.error, sizeof api.error, "libheif has no %s", #name); \
        return; \
    }
    PK_HEIF_FUNCTIONS(PK_HEIF_BIND)
#undef PK_HEIF_BIND
    api.loaded = 1;
}

int pk_heif_load(void) {
    pthread_once(&once, open_libheif);
    return api.loaded;
}

const char *pk_heif_load_error(void) { return api.error; }

// The calls; only after pk_heif_load() returned 1.
const char *pk_heif_get_version(void) { return api.heif_get_version(); }
struct heif_context *pk_heif_context_alloc(void) { return api.heif_context_alloc(); }
void pk_heif_context_free(struct heif_context *c) { api.heif_context_free(c); }
void pk_heif_context_set_max_decoding_threads(struct heif_context *c, int n) {
    api.heif_context_set_max_decoding_threads(c, n);
}
struct heif_error pk_heif_context_read_from_memory_without_copy(struct heif_context *c, const void *bytes, size_t size,
        const struct heif_reading_options *options) {
    return api.heif_context_read_from_memory_without_copy(c, bytes, size, options);
}
struct heif_error pk_heif_context_get_primary_image_handle(struct heif_context *c, struct heif_image_handle **h) {
    return api.heif_context_get_primary_image_handle(c, h);
}
void pk_heif_image_handle_release(const struct heif_image_handle *h) { api.heif_image_handle_release(h); }
int pk_heif_image_handle_get_width(const struct heif_image_handle *h) { return api.heif_image_handle_get_width(h); }
int pk_heif_image_handle_get_height(const struct heif_image_handle *h) { return api.heif_image_handle_get_height(h); }
enum heif_color_profile_type pk_heif_image_handle_get_color_profile_type(const struct heif_image_handle *h) {
    return api.heif_image_handle_get_color_profile_type(h);
}
size_t pk_heif_image_handle_get_raw_color_profile_size(const struct heif_image_handle *h) {
    return api.heif_image_handle_get_raw_color_profile_size(h);
}
struct heif_error pk_heif_image_handle_get_raw_color_profile(const struct heif_image_handle *h, void *out) {
    return api.heif_image_handle_get_raw_color_profile(h, out);
}
int pk_heif_image_handle_has_alpha_channel(const struct heif_image_handle *h) {
    return api.heif_image_handle_has_alpha_channel(h);
}
int pk_heif_image_handle_is_premultiplied_alpha(const struct heif_image_handle *h) {
    return api.heif_image_handle_is_premultiplied_alpha(h);
}
int pk_heif_image_handle_get_number_of_metadata_blocks(const struct heif_image_handle *h, const char *type) {
    return api.heif_image_handle_get_number_of_metadata_blocks(h, type);
}
int pk_heif_image_handle_get_list_of_metadata_block_IDs(const struct heif_image_handle *h, const char *type,
        heif_item_id *ids, int count) {
    return api.heif_image_handle_get_list_of_metadata_block_IDs(h, type, ids, count);
}
const char *pk_heif_image_handle_get_metadata_content_type(const struct heif_image_handle *h, heif_item_id id) {
    return api.heif_image_handle_get_metadata_content_type(h, id);
}
size_t pk_heif_image_handle_get_metadata_size(const struct heif_image_handle *h, heif_item_id id) {
    return api.heif_image_handle_get_metadata_size(h, id);
}
struct heif_error pk_heif_image_handle_get_metadata(const struct heif_image_handle *h, heif_item_id id, void *out) {
    return api.heif_image_handle_get_metadata(h, id, out);
}
struct heif_error pk_heif_decode_image(const struct heif_image_handle *h, struct heif_image **image,
        enum heif_colorspace space, enum heif_chroma chroma,
        const struct heif_decoding_options *options) {
    return api.heif_decode_image(h, image, space, chroma, options);
}
void pk_heif_image_release(const struct heif_image *image) { api.heif_image_release(image); }
int pk_heif_image_get_width(const struct heif_image *image, enum heif_channel channel) {
    return api.heif_image_get_width(image, channel);
}
int pk_heif_image_get_height(const struct heif_image *image, enum heif_channel channel) {
    return api.heif_image_get_height(image, channel);
}
const uint8_t *pk_heif_image_get_plane_readonly(const struct heif_image *image, enum heif_channel channel, int *stride) {
    return api.heif_image_get_plane_readonly(image, channel, stride);
}
int pk_heif_image_get_bits_per_pixel_range(const struct heif_image *image, enum heif_channel channel) {
    return api.heif_image_get_bits_per_pixel_range(image, channel);
}
