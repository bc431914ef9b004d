#ifndef PIPELINEKIT_CGIF_SHIM_H
#define PIPELINEKIT_CGIF_SHIM_H
// giflib from memory, for GIF shrink-on-load (Plugins/Formats/GIF/GIFReducer.swift): the first image
// of a GIF, when it covers the logical screen, as 8-bit RGBA (the transparent index as alpha 0).
// Nothing after the first image is read.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <gif_lib.h>

typedef struct {
    const unsigned char *data;
    size_t size, position;
} pk_gif_source;

static int pk_gif_read(GifFileType *gif, GifByteType *out, int length) {
    pk_gif_source *source = (pk_gif_source *)gif->UserData;
    if (length <= 0 || source->position >= source->size) return 0;
    size_t n = (size_t)length;
    if (n > source->size - source->position) n = source->size - source->position;
    memcpy(out, source->data + source->position, n);
    source->position += n;
    return (int)n;
}

/// Decodes the first image of `data` into `*out` (malloc'ed, width x height x 4 bytes: free it).
/// Returns 1 on success, -1 when the first image does not cover the screen (not for this path),
/// 0 on failure with giflib's reason in `message`. `*alpha` is 1 when the transparent index is used.
static inline int pk_gif_first_frame(const void *data, size_t size, int *width, int *height, int *alpha,
                                     unsigned char **out, char *message, size_t message_size) {
    pk_gif_source source = {(const unsigned char *)data, size, 0};
    int error = 0, transparent = -1, result = 0;
    unsigned char *rgba = NULL, *line = NULL;
    *out = NULL; *alpha = 0; message[0] = 0;
    GifFileType *gif = DGifOpen(&source, pk_gif_read, &error);
    if (!gif) {
        snprintf(message, message_size, "%s", GifErrorString(error) ? GifErrorString(error) : "cannot open");
        return 0;
    }
    for (;;) {
        GifRecordType type;
        if (DGifGetRecordType(gif, &type) == GIF_ERROR) goto failed;
        if (type == EXTENSION_RECORD_TYPE) {
            int code = 0;
            GifByteType *extension = NULL;
            if (DGifGetExtension(gif, &code, &extension) == GIF_ERROR) goto failed;
            if (code == GRAPHICS_EXT_FUNC_CODE && extension && extension[0] >= 4) {
                GraphicsControlBlock block;
                if (DGifExtensionToGCB(extension[0], extension + 1, &block) == GIF_OK) transparent = block.TransparentColor;
            }
            while (extension) {
                if (DGifGetExtensionNext(gif, &extension) == GIF_ERROR) goto failed;
            }
        } else if (type == IMAGE_DESC_RECORD_TYPE) {
            if (DGifGetImageDesc(gif) == GIF_ERROR) goto failed;
            GifImageDesc *desc = &gif->Image;
            int w = gif->SWidth, h = gif->SHeight;
            if (w <= 0 || h <= 0 || desc->Left != 0 || desc->Top != 0 || desc->Width != w || desc->Height != h) {
                result = -1;
                goto done;
            }
            ColorMapObject *map = desc->ColorMap ? desc->ColorMap : gif->SColorMap;
            if (!map || !map->Colors) { snprintf(message, message_size, "no colour map"); goto done; }
            rgba = (unsigned char *)malloc((size_t)w * (size_t)h * 4);
            line = (unsigned char *)malloc((size_t)w);
            if (!rgba || !line) { snprintf(message, message_size, "out of memory"); goto done; }
            static const int starts[4] = {0, 4, 2, 1}, steps[4] = {8, 8, 4, 2};
            int passes = desc->Interlace ? 4 : 1;
            for (int pass = 0; pass < passes; pass++) {
                int y0 = desc->Interlace ? starts[pass] : 0, step = desc->Interlace ? steps[pass] : 1;
                for (int y = y0; y < h; y += step) {
                    if (DGifGetLine(gif, line, w) == GIF_ERROR) goto failed;
                    unsigned char *row = rgba + (size_t)y * (size_t)w * 4;
                    for (int x = 0; x < w; x++) {
                        int index = line[x];
                        if (index < map->ColorCount) {
                            row[x * 4] = map->Colors[index].Red;
                            row[x * 4 + 1] = map->Colors[index].Green;
                            row[x * 4 + 2] = map->Colors[index].Blue;
                        } else {
                            row[x * 4] = row[x * 4 + 1] = row[x * 4 + 2] = 0;
                        }
                        if (index == transparent) { row[x * 4 + 3] = 0; *alpha = 1; } else row[x * 4 + 3] = 255;
                    }
                }
            }
            *width = w;
            *height = h;
            *out = rgba;
            rgba = NULL;
            result = 1;
            goto done;
        } else if (type == TERMINATE_RECORD_TYPE) {
            snprintf(message, message_size, "no image in the file");
            goto done;
        }
    }
failed:
    snprintf(message, message_size, "%s", GifErrorString(gif->Error) ? GifErrorString(gif->Error) : "read error");
done:
    free(rgba);
    free(line);
    DGifCloseFile(gif, &error);
    return result;
}
#endif
