#ifndef PIPELINEKIT_CHEIF_H
#define PIPELINEKIT_CHEIF_H
// libheif, for AVIF and HEIC shrink-on-load (Plugins/Formats/HEIF/HEIFReducer.swift): the primary
// image decoded to interleaved 8-bit RGB(A), reduced in Swift before ImageMagick sees it.
//
// libheif is opened on first use, not linked: with its codecs (libde265, which builds its tables
// when loaded, x265, libaom, dav1d) it cost every run about 4.5 ms of start-up, a tenth of a run
// over one small image, whether or not the run ever met a HEIC or AVIF file. The functions below
// are libheif's, with pk_ in front, called through a table that heif_loader.c fills with dlsym;
// their types come from libheif's own header, so a mismatch is a compile error.
//
// Call pk_heif_load() first: 0 means libheif could not be opened, and pk_heif_load_error() says why.
#include <libheif/heif.h>

/// 1 once libheif is open (opening it on the first call, once per process), 0 if it cannot be.
int pk_heif_load(void);

/// Why pk_heif_load() returned 0.
const char *pk_heif_load_error(void);

/// The version of the libheif that was opened, such as "1.15.1".
const char *pk_heif_get_version(void);
struct heif_context *pk_heif_context_alloc(void);
void pk_heif_context_free(struct heif_context *c);
void pk_heif_context_set_max_decoding_threads(struct heif_context *c, int n);
struct heif_error pk_heif_context_read_from_memory_without_copy(struct heif_context *c, const void *bytes, size_t size,
        const struct heif_reading_options *options);
struct heif_error pk_heif_context_get_primary_image_handle(struct heif_context *c, struct heif_image_handle **h);
void pk_heif_image_handle_release(const struct heif_image_handle *h);
int pk_heif_image_handle_get_width(const struct heif_image_handle *h);
int pk_heif_image_handle_get_height(const struct heif_image_handle *h);
enum heif_color_profile_type pk_heif_image_handle_get_color_profile_type(const struct heif_image_handle *h);
size_t pk_heif_image_handle_get_raw_color_profile_size(const struct heif_image_handle *h);
struct heif_error pk_heif_image_handle_get_raw_color_profile(const struct heif_image_handle *h, void *out);
int pk_heif_image_handle_has_alpha_channel(const struct heif_image_handle *h);
int pk_heif_image_handle_is_premultiplied_alpha(const struct heif_image_handle *h);
int pk_heif_image_handle_get_number_of_metadata_blocks(const struct heif_image_handle *h, const char *type);
int pk_heif_image_handle_get_list_of_metadata_block_IDs(const struct heif_image_handle *h, const char *type,
        heif_item_id *ids, int count);
const char *pk_heif_image_handle_get_metadata_content_type(const struct heif_image_handle *h, heif_item_id id);
size_t pk_heif_image_handle_get_metadata_size(const struct heif_image_handle *h, heif_item_id id);
struct heif_error pk_heif_image_handle_get_metadata(const struct heif_image_handle *h, heif_item_id id, void *out);
struct heif_error pk_heif_decode_image(const struct heif_image_handle *h, struct heif_image **image,
        enum heif_colorspace space, enum heif_chroma chroma,
        const struct heif_decoding_options *options);
void pk_heif_image_release(const struct heif_image *image);
int pk_heif_image_get_width(const struct heif_image *image, enum heif_channel channel);
int pk_heif_image_get_height(const struct heif_image *image, enum heif_channel channel);
const uint8_t *pk_heif_image_get_plane_readonly(const struct heif_image *image, enum heif_channel channel, int *stride);
int pk_heif_image_get_bits_per_pixel_range(const struct heif_image *image, enum heif_channel channel);

#endif
