// image_decoder.cpp: the reference kernel of ImageDecoder-20: encoded image bytes (a uint8 1-D
// tensor) to an HWC uint8 image in RGB, BGR or grayscale.
//
// Codecs come from Debian's libraries (libjpeg-turbo, libpng, libtiff, libwebp, openjpeg); BMP
// and PNM are simple enough to parse here. The ONNX reference implementation (and so the
// conformance data) is Pillow, so the choices where decoders may differ follow Pillow: libjpeg's
// default ISLOW IDCT with "fancy" chroma upsampling (also what the spec prescribes), alpha
// dropped, 16-bit samples cut to their high byte, and grayscale from colour by Pillow's fixed
// point ITU-R 601-2 luma, (19595 R + 38470 G + 7471 B + 2^15) >> 16, applied after decoding to
// RGB (not libjpeg's own Y channel, which differs by rounding).
//
// Every codec reports failure as a one-line message through ctx.fail, never a crash or exit:
// libjpeg and libpng jump back (setjmp/longjmp) out of their error callbacks, libtiff and
// openjpeg get per-handle callbacks, and every library warning is swallowed instead of printed.
// Functions holding a setjmp construct all their C++ objects before it, so a longjmp never skips
// a destructor. The spec's alternative for undecodable bytes, an empty output, is not taken:
// a silent empty image hides the error from the caller.
#include <algorithm>
#include <array>
#include <cctype>
#include <csetjmp>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <jerror.h>
#include <jpeglib.h>
#include <openjpeg.h>
#include <png.h>
#include <tiffio.h>
#include <webp/decode.h>

#include "exec/ref/kernel_util.h"

namespace onnxtool::ref {

namespace {

using Bytes = std::span<const uint8_t>;

/// A decoded image, rows top to bottom, pixels interleaved: 1 channel (gray) or 3 (R, G, B).
struct Image {
  int64_t width = 0;
  int64_t height = 0;
  int channels = 0;
  std::vector<uint8_t> pixels;
};

/// Why a decoder gave up; the kernel turns it into ctx.fail.
struct DecodeError {
  std::string message;
};

// A corrupt header can claim gigapixels; refuse before allocating rather than exhaust memory.
constexpr int64_t kMaxDecodedBytes = int64_t{1} << 30;

/// Sizes `img` for width x height x channels, failing on empty or absurd dimensions.
void allocate(Image& img, const char* format, int64_t width, int64_t height, int channels) {
  if (width <= 0 || height <= 0)
    throw DecodeError{fmt::format("{}: invalid image size {}x{}", format, width, height)};
  if (width > kMaxDecodedBytes / height / channels)
    throw DecodeError{fmt::format("{}: image of {}x{} pixels is too large, expected at most {} decoded bytes", format,
                                  width, height, kMaxDecodedBytes)};
  img.width = width;
  img.height = height;
  img.channels = channels;
  img.pixels.assign(static_cast<size_t>(width * height * channels), 0);
}

/// Library messages on one line, whatever they contain.
std::string oneLine(std::string s) {
  std::replace_if(s.begin(), s.end(), [](char c) { return c == '\n' || c == '\r'; }, ' ');
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

/// Keeps the first `keep` of every `from` interleaved samples (drops alpha and extra channels).
void keepChannels(Image& img, const std::vector<uint8_t>& src, int from, int keep) {
  size_t n = static_cast<size_t>(img.width * img.height);
  for (size_t i = 0; i < n; ++i)
    for (int c = 0; c < keep; ++c) img.pixels[i * keep + c] = src[i * from + c];
}

/// Subtractive CMYK (0 = no ink) to RGB, as print separations compose.
void cmykToRgb(Image& img, const std::vector<uint8_t>& cmyk) {
  size_t n = static_cast<size_t>(img.width * img.height);
  for (size_t i = 0; i < n; ++i) {
    int k = 255 - cmyk[i * 4 + 3];
    for (int c = 0; c < 3; ++c) img.pixels[i * 3 + c] = static_cast<uint8_t>(((255 - cmyk[i * 4 + c]) * k + 127) / 255);
  }
}

// ---------------------------------------------------------------------------------------------
// JPEG (libjpeg-turbo)

struct JpegErrors {
  jpeg_error_mgr mgr;  // first member: libjpeg hands back a jpeg_error_mgr*
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

[[noreturn]] void jpegErrorExit(j_common_ptr cinfo) {
  auto* errors = reinterpret_cast<JpegErrors*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, errors->message);
  std::longjmp(errors->jump, 1);
}

// Warnings are not printed; a premature end of data is an error (Pillow refuses truncated
// files too), while libjpeg would pad the image with gray and carry on.
void jpegEmitMessage(j_common_ptr cinfo, int level) {
  if (level == -1 && cinfo->err->msg_code == JWRN_JPEG_EOF) jpegErrorExit(cinfo);
}

Image decodeJpeg(Bytes in) {
  Image img;
  std::vector<uint8_t> samples;  // CMYK before conversion
  jpeg_decompress_struct cinfo{};
  JpegErrors errors{};
  cinfo.err = jpeg_std_error(&errors.mgr);
  errors.mgr.error_exit = jpegErrorExit;
  errors.mgr.emit_message = jpegEmitMessage;
  if (setjmp(errors.jump)) {
    jpeg_destroy_decompress(&cinfo);
    throw DecodeError{"JPEG: " + oneLine(errors.message)};
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, in.data(), static_cast<unsigned long>(in.size()));
  jpeg_read_header(&cinfo, TRUE);
  switch (cinfo.jpeg_color_space) {
    case JCS_GRAYSCALE: cinfo.out_color_space = JCS_GRAYSCALE; break;
    case JCS_CMYK:
    case JCS_YCCK: cinfo.out_color_space = JCS_CMYK; break;
    default: cinfo.out_color_space = JCS_RGB; break;
  }
  jpeg_start_decompress(&cinfo);
  int channels = cinfo.output_components;
  int64_t width = cinfo.output_width, height = cinfo.output_height;
  if (width <= 0 || height <= 0 || width > kMaxDecodedBytes / height / channels) {
    jpeg_destroy_decompress(&cinfo);
    throw DecodeError{fmt::format("JPEG: image of {}x{} pixels is empty or too large", width, height)};
  }
  samples.resize(static_cast<size_t>(width * height * channels));
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = samples.data() + static_cast<size_t>(cinfo.output_scanline) * width * channels;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  bool cmyk = cinfo.out_color_space == JCS_CMYK, adobeInverted = cinfo.saw_Adobe_marker;
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);

  if (!cmyk) {
    img.width = width;
    img.height = height;
    img.channels = channels;
    img.pixels = std::move(samples);
    return img;
  }
  // Adobe's CMYK JPEGs store inverted samples (255 = no ink).
  if (adobeInverted)
    for (auto& s : samples) s = static_cast<uint8_t>(255 - s);
  allocate(img, "JPEG", width, height, 3);
  cmykToRgb(img, samples);
  return img;
}

// ---------------------------------------------------------------------------------------------
// PNG (libpng)

struct PngSource {
  Bytes in;
  size_t pos = 0;
  char message[256] = {};
};

[[noreturn]] void pngError(png_structp png, png_const_charp msg) {
  auto* src = static_cast<PngSource*>(png_get_error_ptr(png));
  std::snprintf(src->message, sizeof(src->message), "%s", msg);
  png_longjmp(png, 1);
}

void pngWarning(png_structp, png_const_charp) {}

void pngRead(png_structp png, png_bytep out, png_size_t n) {
  auto* src = static_cast<PngSource*>(png_get_io_ptr(png));
  if (n > src->in.size() - src->pos) png_error(png, "unexpected end of data");
  std::memcpy(out, src->in.data() + src->pos, n);
  src->pos += n;
}

Image decodePng(Bytes in) {
  Image img;
  std::vector<uint8_t> samples;
  std::vector<png_bytep> rows;
  PngSource src{in};
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, pngError, pngWarning);
  if (!png) throw DecodeError{"PNG: cannot create a decoder"};
  png_infop info = png_create_info_struct(png);
  if (!info) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    throw DecodeError{"PNG: cannot create a decoder"};
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    throw DecodeError{std::string("PNG: ") + oneLine(src.message)};
  }
  png_set_read_fn(png, &src, pngRead);
  png_read_info(png, info);
  int colorType = png_get_color_type(png, info);
  // Palette and sub-byte gray to 8-bit samples, 16-bit samples to their high byte (Pillow's
  // "RGB;16B" unpacking); gamma and colour profiles are left alone, as Pillow leaves them.
  if (colorType == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (colorType == PNG_COLOR_TYPE_GRAY && png_get_bit_depth(png, info) < 8) png_set_expand_gray_1_2_4_to_8(png);
  png_set_strip_16(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  int64_t width = png_get_image_width(png, info), height = png_get_image_height(png, info);
  int channels = png_get_channels(png, info);
  if (width <= 0 || height <= 0 || width > kMaxDecodedBytes / height / channels) {
    png_destroy_read_struct(&png, &info, nullptr);
    throw DecodeError{fmt::format("PNG: image of {}x{} pixels is empty or too large", width, height)};
  }
  samples.resize(static_cast<size_t>(width * height * channels));
  rows.resize(static_cast<size_t>(height));
  for (int64_t y = 0; y < height; ++y) rows[y] = samples.data() + y * width * channels;
  png_read_image(png, rows.data());
  png_read_end(png, nullptr);
  png_destroy_read_struct(&png, &info, nullptr);

  int keep = channels <= 2 ? 1 : 3;  // gray+alpha and RGBA lose their alpha
  allocate(img, "PNG", width, height, keep);
  keepChannels(img, samples, channels, keep);
  return img;
}

// ---------------------------------------------------------------------------------------------
// TIFF (libtiff, read from memory through client callbacks)

struct TiffSource {
  Bytes in;
  uint64_t pos = 0;
  std::string message;
};

tmsize_t tiffRead(thandle_t h, void* out, tmsize_t n) {
  auto* src = static_cast<TiffSource*>(h);
  if (n < 0 || src->pos >= src->in.size()) return 0;
  size_t k = std::min(static_cast<size_t>(n), static_cast<size_t>(src->in.size() - src->pos));
  std::memcpy(out, src->in.data() + src->pos, k);
  src->pos += k;
  return static_cast<tmsize_t>(k);
}
tmsize_t tiffWrite(thandle_t, void*, tmsize_t) { return -1; }
toff_t tiffSeek(thandle_t h, toff_t off, int whence) {
  auto* src = static_cast<TiffSource*>(h);
  uint64_t base = whence == SEEK_CUR ? src->pos : whence == SEEK_END ? src->in.size() : 0;
  src->pos = base + off;  // past the end is allowed; reads there return nothing
  return src->pos;
}
int tiffClose(thandle_t) { return 0; }
toff_t tiffSize(thandle_t h) { return static_cast<TiffSource*>(h)->in.size(); }
int tiffMap(thandle_t, void**, toff_t*) { return 0; }
void tiffUnmap(thandle_t, void*, toff_t) {}

int tiffErrorHandler(TIFF*, void* user, const char* module, const char* fmtText, va_list ap) {
  auto* src = static_cast<TiffSource*>(user);
  if (src->message.empty()) {  // the first error says what went wrong; later ones are fallout
    char buf[512];
    std::vsnprintf(buf, sizeof(buf), fmtText, ap);
    src->message = oneLine(module ? fmt::format("{}: {}", module, buf) : std::string(buf));
  }
  return 1;  // handled: libtiff must not print it
}
int tiffWarningHandler(TIFF*, void*, const char*, const char*, va_list) { return 1; }

struct TiffCloser {
  TIFF* tif = nullptr;
  TIFFOpenOptions* opts = nullptr;
  ~TiffCloser() {
    if (tif) TIFFClose(tif);
    if (opts) TIFFOpenOptionsFree(opts);
  }
};

Image decodeTiff(Bytes in) {
  TiffSource src{in, 0, {}};
  TiffCloser handle;
  auto failure = [&](const char* what) {
    return DecodeError{"TIFF: " + (src.message.empty() ? std::string(what) : src.message)};
  };
  handle.opts = TIFFOpenOptionsAlloc();
  if (!handle.opts) throw DecodeError{"TIFF: cannot create a decoder"};
  TIFFOpenOptionsSetErrorHandlerExtR(handle.opts, tiffErrorHandler, &src);
  TIFFOpenOptionsSetWarningHandlerExtR(handle.opts, tiffWarningHandler, &src);
  // "m": no memory mapping (the callbacks already serve memory).
  handle.tif = TIFFClientOpenExt("memory", "rm", &src, tiffRead, tiffWrite, tiffSeek, tiffClose, tiffSize, tiffMap,
                                 tiffUnmap, handle.opts);
  if (!handle.tif) throw failure("not a readable TIFF stream");
  uint32_t w = 0, h = 0;
  uint16_t photometric = PHOTOMETRIC_RGB, samplesPerPixel = 1, extraCount = 0;
  uint16_t* extraTypes = nullptr;
  TIFFGetField(handle.tif, TIFFTAG_IMAGEWIDTH, &w);
  TIFFGetField(handle.tif, TIFFTAG_IMAGELENGTH, &h);
  TIFFGetFieldDefaulted(handle.tif, TIFFTAG_PHOTOMETRIC, &photometric);
  TIFFGetFieldDefaulted(handle.tif, TIFFTAG_SAMPLESPERPIXEL, &samplesPerPixel);
  TIFFGetFieldDefaulted(handle.tif, TIFFTAG_EXTRASAMPLES, &extraCount, &extraTypes);
  char why[1024] = {};
  if (!TIFFRGBAImageOK(handle.tif, why)) throw DecodeError{"TIFF: " + oneLine(why)};
  // libtiff's RGBA reader serves every layout (strips, tiles, planes, palettes, YCbCr, bit
  // depths); gray images are read through it too and keep one channel.
  bool gray = (photometric == PHOTOMETRIC_MINISBLACK || photometric == PHOTOMETRIC_MINISWHITE) &&
              samplesPerPixel - extraCount <= 1;
  Image img;
  allocate(img, "TIFF", w, h, 3);
  std::vector<uint32_t> raster(static_cast<size_t>(img.width * img.height));
  if (!TIFFReadRGBAImageOriented(handle.tif, w, h, raster.data(), ORIENTATION_TOPLEFT, 1))
    throw failure("cannot decode the image data");
  if (gray) img.channels = 1;
  for (size_t i = 0; i < raster.size(); ++i) {
    if (gray) {
      img.pixels[i] = static_cast<uint8_t>(TIFFGetR(raster[i]));
    } else {
      img.pixels[i * 3] = static_cast<uint8_t>(TIFFGetR(raster[i]));
      img.pixels[i * 3 + 1] = static_cast<uint8_t>(TIFFGetG(raster[i]));
      img.pixels[i * 3 + 2] = static_cast<uint8_t>(TIFFGetB(raster[i]));
    }
  }
  if (gray) img.pixels.resize(raster.size());
  return img;
}

// ---------------------------------------------------------------------------------------------
// WebP (libwebp)

Image decodeWebp(Bytes in) {
  WebPBitstreamFeatures features;
  VP8StatusCode status = WebPGetFeatures(in.data(), in.size(), &features);
  if (status != VP8_STATUS_OK) throw DecodeError{fmt::format("WebP: invalid bitstream (status {})", static_cast<int>(status))};
  if (features.has_animation) throw DecodeError{"WebP: animated images are not supported"};
  Image img;
  int channels = features.has_alpha ? 4 : 3;
  allocate(img, "WebP", features.width, features.height, 3);
  std::vector<uint8_t> samples(static_cast<size_t>(img.width * img.height * channels));
  int stride = static_cast<int>(img.width) * channels;
  uint8_t* ok = features.has_alpha ? WebPDecodeRGBAInto(in.data(), in.size(), samples.data(), samples.size(), stride)
                                   : WebPDecodeRGBInto(in.data(), in.size(), samples.data(), samples.size(), stride);
  if (!ok) throw DecodeError{"WebP: cannot decode the image data"};
  keepChannels(img, samples, channels, 3);
  return img;
}

// ---------------------------------------------------------------------------------------------
// JPEG 2000 (openjpeg, JP2 container or raw J2K codestream)

struct J2kSource {
  Bytes in;
  uint64_t pos = 0;
  std::string message;
};

OPJ_SIZE_T j2kRead(void* out, OPJ_SIZE_T n, void* user) {
  auto* src = static_cast<J2kSource*>(user);
  if (src->pos >= src->in.size()) return static_cast<OPJ_SIZE_T>(-1);
  size_t k = std::min(static_cast<size_t>(n), static_cast<size_t>(src->in.size() - src->pos));
  std::memcpy(out, src->in.data() + src->pos, k);
  src->pos += k;
  return k;
}
OPJ_OFF_T j2kSkip(OPJ_OFF_T n, void* user) {
  auto* src = static_cast<J2kSource*>(user);
  if (n < 0 && static_cast<uint64_t>(-n) > src->pos) return -1;
  src->pos += n;
  return n;
}
OPJ_BOOL j2kSeek(OPJ_OFF_T off, void* user) {
  auto* src = static_cast<J2kSource*>(user);
  if (off < 0 || static_cast<uint64_t>(off) > src->in.size()) return OPJ_FALSE;
  src->pos = static_cast<uint64_t>(off);
  return OPJ_TRUE;
}
void j2kError(const char* msg, void* user) {
  auto* src = static_cast<J2kSource*>(user);
  if (src->message.empty()) src->message = oneLine(msg);
}
void j2kQuiet(const char*, void*) {}

struct J2kHandles {
  opj_stream_t* stream = nullptr;
  opj_codec_t* codec = nullptr;
  opj_image_t* image = nullptr;
  ~J2kHandles() {
    if (image) opj_image_destroy(image);
    if (codec) opj_destroy_codec(codec);
    if (stream) opj_stream_destroy(stream);
  }
};

/// A component sample scaled to 8 bits (Pillow's j2k unpacking: unsigned, then shifted).
uint8_t j2kSample(const opj_image_comp_t& c, int64_t x, int64_t y, const opj_image_t& image) {
  // Subsampled components are upsampled by repetition; positions are on the reference grid.
  int64_t cx = (x + image.x0) / c.dx - c.x0;
  int64_t cy = (y + image.y0) / c.dy - c.y0;
  cx = std::clamp<int64_t>(cx, 0, static_cast<int64_t>(c.w) - 1);
  cy = std::clamp<int64_t>(cy, 0, static_cast<int64_t>(c.h) - 1);
  int64_t v = c.data[cy * c.w + cx];
  int prec = static_cast<int>(c.prec);
  if (c.sgnd) v += int64_t{1} << (prec - 1);
  v = prec > 8 ? v >> (prec - 8) : v << (8 - prec);
  return static_cast<uint8_t>(std::clamp<int64_t>(v, 0, 255));
}

Image decodeJpeg2000(Bytes in, bool jp2) {
  J2kSource src{in, 0, {}};
  J2kHandles h;
  auto failure = [&](const char* what) {
    return DecodeError{"JPEG 2000: " + (src.message.empty() ? std::string(what) : src.message)};
  };
  h.stream = opj_stream_create(OPJ_J2K_STREAM_CHUNK_SIZE, OPJ_TRUE);
  h.codec = opj_create_decompress(jp2 ? OPJ_CODEC_JP2 : OPJ_CODEC_J2K);
  if (!h.stream || !h.codec) throw DecodeError{"JPEG 2000: cannot create a decoder"};
  opj_stream_set_user_data(h.stream, &src, nullptr);
  opj_stream_set_user_data_length(h.stream, in.size());
  opj_stream_set_read_function(h.stream, j2kRead);
  opj_stream_set_skip_function(h.stream, j2kSkip);
  opj_stream_set_seek_function(h.stream, j2kSeek);
  opj_set_error_handler(h.codec, j2kError, &src);
  opj_set_warning_handler(h.codec, j2kQuiet, &src);
  opj_set_info_handler(h.codec, j2kQuiet, &src);
  opj_dparameters_t params;
  opj_set_default_decoder_parameters(&params);
  if (!opj_setup_decoder(h.codec, &params)) throw failure("cannot set up the decoder");
  if (!opj_read_header(h.stream, h.codec, &h.image)) throw failure("invalid header");
  if (!opj_decode(h.codec, h.stream, h.image) || !opj_end_decompress(h.codec, h.stream))
    throw failure("cannot decode the image data");
  const opj_image_t& image = *h.image;
  if (image.numcomps == 0) throw DecodeError{"JPEG 2000: image has no components"};
  for (OPJ_UINT32 i = 0; i < image.numcomps; ++i) {
    const opj_image_comp_t& c = image.comps[i];
    if (!c.data || c.w == 0 || c.h == 0 || c.dx == 0 || c.dy == 0 || c.prec == 0 || c.prec > 31)
      throw DecodeError{fmt::format("JPEG 2000: component {} is empty or malformed", i)};
  }
  int64_t width = static_cast<int64_t>(image.x1) - image.x0, height = static_cast<int64_t>(image.y1) - image.y0;
  Image img;
  bool gray = image.numcomps < 3;  // gray, or gray + alpha
  allocate(img, "JPEG 2000", width, height, gray ? 1 : 3);
  bool cmyk = image.color_space == OPJ_CLRSPC_CMYK && image.numcomps >= 4;
  bool ycc = image.color_space == OPJ_CLRSPC_SYCC && !gray;
  std::vector<uint8_t> cmykSamples(cmyk ? static_cast<size_t>(width * height * 4) : 0);
  for (int64_t y = 0; y < height; ++y) {
    for (int64_t x = 0; x < width; ++x) {
      size_t p = static_cast<size_t>(y * width + x);
      if (gray) {
        img.pixels[p] = j2kSample(image.comps[0], x, y, image);
      } else if (cmyk) {
        for (int c = 0; c < 4; ++c) cmykSamples[p * 4 + c] = j2kSample(image.comps[c], x, y, image);
      } else if (ycc) {
        // Full-range BT.601 YCbCr, as JPEG (and Pillow's YCbCr mode) defines it.
        double yy = j2kSample(image.comps[0], x, y, image);
        double cb = j2kSample(image.comps[1], x, y, image) - 128.0;
        double cr = j2kSample(image.comps[2], x, y, image) - 128.0;
        double rgb[3] = {yy + 1.402 * cr, yy - 0.344136 * cb - 0.714136 * cr, yy + 1.772 * cb};
        for (int c = 0; c < 3; ++c) img.pixels[p * 3 + c] = static_cast<uint8_t>(std::clamp(std::lround(rgb[c]), 0L, 255L));
      } else {
        for (int c = 0; c < 3; ++c) img.pixels[p * 3 + c] = j2kSample(image.comps[c], x, y, image);
      }
    }
  }
  if (cmyk) cmykToRgb(img, cmykSamples);
  return img;
}

// ---------------------------------------------------------------------------------------------
// BMP (parsed here: uncompressed 1/4/8-bit palette, 16/24/32-bit, and BI_BITFIELDS masks)

uint32_t le16(Bytes in, size_t at) { return in[at] | (in[at + 1] << 8); }
uint32_t le32(Bytes in, size_t at) {
  return in[at] | (in[at + 1] << 8) | (in[at + 2] << 16) | (static_cast<uint32_t>(in[at + 3]) << 24);
}

/// A channel extracted by `mask` from a pixel, scaled to 0..255 (Pillow's v * 255 / max).
uint8_t maskedChannel(uint32_t pixel, uint32_t mask) {
  if (mask == 0) return 0;
  int shift = __builtin_ctz(mask);
  uint64_t max = mask >> shift;
  return static_cast<uint8_t>(((pixel & mask) >> shift) * 255 / max);
}

Image decodeBmp(Bytes in) {
  auto need = [&](size_t end) {
    if (end > in.size()) throw DecodeError{"BMP: unexpected end of data"};
  };
  need(14 + 4);
  uint32_t dataOffset = le32(in, 10);
  uint32_t headerSize = le32(in, 14);
  if (headerSize != 12 && headerSize < 40) throw DecodeError{fmt::format("BMP: unsupported header size {}", headerSize)};
  need(14 + static_cast<size_t>(std::min<uint32_t>(headerSize, 124)));
  int64_t width, height;
  uint32_t bpp, compression = 0, colorsUsed = 0;
  if (headerSize == 12) {  // OS/2 BITMAPCOREHEADER
    width = le16(in, 18);
    height = static_cast<int16_t>(le16(in, 20));
    bpp = le16(in, 24);
  } else {
    width = static_cast<int32_t>(le32(in, 18));
    height = static_cast<int32_t>(le32(in, 22));
    bpp = le16(in, 28);
    compression = le32(in, 30);
    colorsUsed = le32(in, 46);
  }
  bool topDown = height < 0;
  height = topDown ? -height : height;
  // Masks: defaults of BI_RGB, or BI_BITFIELDS / BI_ALPHABITFIELDS ones, in the header (V2+)
  // or right after a 40-byte one.
  std::array<uint32_t, 3> masks = bpp == 16 ? std::array<uint32_t, 3>{0x7C00, 0x03E0, 0x001F}
                                            : std::array<uint32_t, 3>{0xFF0000, 0x00FF00, 0x0000FF};
  size_t paletteAt = 14 + headerSize;
  if (compression == 3 || compression == 6) {
    if (bpp != 16 && bpp != 32) throw DecodeError{fmt::format("BMP: bit fields with {} bits per pixel", bpp)};
    need(14 + 40 + 12);
    for (int c = 0; c < 3; ++c) masks[c] = le32(in, 14 + 40 + 4 * c);
    if (headerSize == 40) paletteAt += compression == 6 ? 16 : 12;
  } else if (compression != 0) {
    throw DecodeError{fmt::format("BMP: compression {} (RLE, JPEG or PNG payloads) is not supported", compression)};
  }
  if (bpp != 1 && bpp != 4 && bpp != 8 && bpp != 16 && bpp != 24 && bpp != 32)
    throw DecodeError{fmt::format("BMP: {} bits per pixel is not supported", bpp)};
  std::vector<std::array<uint8_t, 3>> palette;
  if (bpp <= 8) {
    size_t entry = headerSize == 12 ? 3 : 4;
    size_t count = colorsUsed ? std::min<size_t>(colorsUsed, 256) : size_t{1} << bpp;
    need(paletteAt + count * entry);
    for (size_t i = 0; i < count; ++i) {
      size_t at = paletteAt + i * entry;
      palette.push_back({in[at + 2], in[at + 1], in[at]});
    }
  }
  if (width <= 0 || height <= 0 || width > (int64_t{1} << 31) || height > (int64_t{1} << 31))
    throw DecodeError{fmt::format("BMP: invalid image size {}x{}", width, height)};
  // The pixel data must all be there before anything is allocated for it.
  size_t stride = static_cast<size_t>((width * bpp + 31) / 32 * 4);
  need(dataOffset + stride * static_cast<size_t>(height - 1) + static_cast<size_t>((width * bpp + 7) / 8));
  Image img;
  allocate(img, "BMP", width, height, 3);
  for (int64_t y = 0; y < height; ++y) {
    size_t row = dataOffset + stride * static_cast<size_t>(topDown ? y : height - 1 - y);
    uint8_t* out = img.pixels.data() + y * width * 3;
    for (int64_t x = 0; x < width; ++x, out += 3) {
      if (bpp <= 8) {
        size_t bit = static_cast<size_t>(x) * bpp;
        uint32_t index = (in[row + bit / 8] >> (8 - bpp - bit % 8)) & ((1u << bpp) - 1);
        if (index >= palette.size()) throw DecodeError{fmt::format("BMP: palette index {} out of range", index)};
        std::copy(palette[index].begin(), palette[index].end(), out);
      } else if (bpp == 24) {
        size_t at = row + static_cast<size_t>(x) * 3;
        out[0] = in[at + 2], out[1] = in[at + 1], out[2] = in[at];
      } else {
        uint32_t pixel = bpp == 16 ? le16(in, row + static_cast<size_t>(x) * 2) : le32(in, row + static_cast<size_t>(x) * 4);
        for (int c = 0; c < 3; ++c) out[c] = maskedChannel(pixel, masks[c]);
      }
    }
  }
  return img;
}

// ---------------------------------------------------------------------------------------------
// PNM (parsed here: P1..P6, any maxval up to 65535)

Image decodePnm(Bytes in) {
  char kind = static_cast<char>(in[1]);
  size_t pos = 2;
  // Header tokens are decimal numbers separated by whitespace, with '#' comments to line end.
  auto token = [&]() -> int64_t {
    while (pos < in.size()) {
      if (in[pos] == '#') {
        while (pos < in.size() && in[pos] != '\n' && in[pos] != '\r') ++pos;
      } else if (std::isspace(in[pos])) {
        ++pos;
      } else {
        break;
      }
    }
    if (pos >= in.size() || !std::isdigit(in[pos])) throw DecodeError{"PNM: malformed or truncated header"};
    int64_t v = 0;
    while (pos < in.size() && std::isdigit(in[pos])) {
      v = v * 10 + (in[pos++] - '0');
      if (v > (int64_t{1} << 32)) throw DecodeError{"PNM: header number out of range"};
    }
    return v;
  };
  bool bitmap = kind == '1' || kind == '4', plain = kind <= '3';
  int channels = kind == '3' || kind == '6' ? 3 : 1;
  int64_t width = token(), height = token();
  int64_t maxval = bitmap ? 1 : token();
  if (maxval < 1 || maxval > 65535) throw DecodeError{fmt::format("PNM: maxval {} out of range 1..65535", maxval)};
  // Every sample takes at least one byte (P4: one bit), so a short stream fails before the
  // image is allocated.
  if (width > kMaxDecodedBytes || height > kMaxDecodedBytes)
    throw DecodeError{fmt::format("PNM: image of {}x{} pixels is too large", width, height)};
  if (width > 0 && height > 0 && static_cast<uint64_t>(width) * static_cast<uint64_t>(height) * channels / (kind == '4' ? 8 : 1) > in.size())
    throw DecodeError{"PNM: unexpected end of data"};
  Image img;
  allocate(img, "PNM", width, height, channels);
  size_t count = img.pixels.size();
  // A sample to 8 bits: bitmaps have 1 = black; others scale maxval to 255, rounding.
  auto scaled = [&](int64_t v) -> uint8_t {
    if (v > maxval) throw DecodeError{fmt::format("PNM: sample {} above maxval {}", v, maxval)};
    if (bitmap) return v ? 0 : 255;
    return static_cast<uint8_t>((v * 255 + maxval / 2) / maxval);
  };
  if (plain) {
    for (size_t i = 0; i < count; ++i) {
      if (bitmap) {  // plain PBM digits need no separators
        while (pos < in.size() && (std::isspace(in[pos]) || in[pos] == '#')) {
          if (in[pos] == '#')
            while (pos < in.size() && in[pos] != '\n' && in[pos] != '\r') ++pos;
          else
            ++pos;
        }
        if (pos >= in.size() || (in[pos] != '0' && in[pos] != '1')) throw DecodeError{"PNM: malformed or truncated data"};
        img.pixels[i] = scaled(in[pos++] - '0');
      } else {
        img.pixels[i] = scaled(token());
      }
    }
    return img;
  }
  ++pos;  // the single whitespace byte ending the header
  if (bitmap) {
    size_t stride = static_cast<size_t>((width + 7) / 8);
    if (pos > in.size() || (in.size() - pos) / stride < static_cast<size_t>(height))
      throw DecodeError{"PNM: unexpected end of data"};
    for (int64_t y = 0; y < height; ++y)
      for (int64_t x = 0; x < width; ++x)
        img.pixels[y * width + x] = scaled((in[pos + y * stride + x / 8] >> (7 - x % 8)) & 1);
    return img;
  }
  size_t sampleBytes = maxval > 255 ? 2 : 1;
  if (pos > in.size() || (in.size() - pos) / sampleBytes < count) throw DecodeError{"PNM: unexpected end of data"};
  for (size_t i = 0; i < count; ++i) {
    size_t at = pos + i * sampleBytes;
    img.pixels[i] = scaled(sampleBytes == 2 ? (in[at] << 8) | in[at + 1] : in[at]);
  }
  return img;
}

// ---------------------------------------------------------------------------------------------
// Format sniffing and the kernel

bool startsWith(Bytes in, std::initializer_list<uint8_t> magic) {
  return in.size() >= magic.size() && std::equal(magic.begin(), magic.end(), in.begin());
}

Image decodeAny(Bytes in) {
  if (startsWith(in, {0xFF, 0xD8, 0xFF})) return decodeJpeg(in);
  if (startsWith(in, {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'})) return decodePng(in);
  if (startsWith(in, {'I', 'I', 42, 0}) || startsWith(in, {'M', 'M', 0, 42}) || startsWith(in, {'I', 'I', 43, 0}) ||
      startsWith(in, {'M', 'M', 0, 43}))
    return decodeTiff(in);
  if (in.size() >= 12 && startsWith(in, {'R', 'I', 'F', 'F'}) && std::memcmp(in.data() + 8, "WEBP", 4) == 0)
    return decodeWebp(in);
  if (startsWith(in, {0, 0, 0, 12, 'j', 'P', ' ', ' ', '\r', '\n', 0x87, '\n'})) return decodeJpeg2000(in, true);
  if (startsWith(in, {0xFF, 0x4F, 0xFF, 0x51})) return decodeJpeg2000(in, false);
  if (startsWith(in, {'B', 'M'})) return decodeBmp(in);
  if (in.size() >= 3 && in[0] == 'P' && in[1] >= '1' && in[1] <= '6' && std::isspace(in[2])) return decodePnm(in);
  throw DecodeError{"unrecognised image format, expected BMP, JPEG, JPEG 2000, PNG, PNM, TIFF or WebP bytes"};
}

void imageDecoder(KernelContext& ctx) {
  const TensorData& encoded = ctx.tensor(0);
  if (encoded.dtype() != DType::UInt8)
    ctx.fail(fmt::format("encoded_stream has type {}, expected uint8", dtypeName(encoded.dtype())));
  if (encoded.dims.size() != 1)
    ctx.fail(fmt::format("encoded_stream has rank {}, expected a 1-D tensor of bytes", encoded.dims.size()));
  std::string format = ctx.attrString("pixel_format", "RGB");
  if (format != "RGB" && format != "BGR" && format != "Grayscale")
    ctx.fail(fmt::format("pixel_format '{}' is not supported, expected RGB, BGR or Grayscale", format));
  if (encoded.raw.size() == 0) ctx.fail("cannot decode an empty encoded_stream");

  Image img;
  try {
    img = decodeAny(Bytes(encoded.raw.data(), encoded.raw.size()));
  } catch (const DecodeError& e) {
    ctx.fail("cannot decode the image: " + e.message);
  }

  int outChannels = format == "Grayscale" ? 1 : 3;
  Tensor out = makeTensor(DType::UInt8, {img.height, img.width, outChannels});
  uint8_t* dst = mutableData<uint8_t>(out);
  const uint8_t* src = img.pixels.data();
  size_t n = static_cast<size_t>(img.width * img.height);
  for (size_t i = 0; i < n; ++i) {
    uint32_t r, g, b;
    if (img.channels == 1) r = g = b = src[i];
    else r = src[i * 3], g = src[i * 3 + 1], b = src[i * 3 + 2];
    if (outChannels == 1) {
      dst[i] = img.channels == 1 ? static_cast<uint8_t>(r) : static_cast<uint8_t>((r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16);
    } else if (format == "RGB") {
      dst[i * 3] = static_cast<uint8_t>(r), dst[i * 3 + 1] = static_cast<uint8_t>(g), dst[i * 3 + 2] = static_cast<uint8_t>(b);
    } else {
      dst[i * 3] = static_cast<uint8_t>(b), dst[i * 3 + 1] = static_cast<uint8_t>(g), dst[i * 3 + 2] = static_cast<uint8_t>(r);
    }
  }
  ctx.setOutput(0, std::move(out));
}

}  // namespace

void registerImageDecoder() { addRef("", "ImageDecoder", 20, "ref.image_decoder", imageDecoder); }

}  // namespace onnxtool::ref
