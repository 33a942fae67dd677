// test_ref_image_decoder.cpp: the ImageDecoder reference kernel on small images built here
// (encoded with the same libraries, or written byte by byte for BMP and PNM), covering what the
// ONNX node tests miss: gray, palette, alpha, 16-bit and interlaced sources, every pixel_format
// from gray and colour sources, and corrupt or truncated bytes failing with one-line errors and
// nothing printed on stderr.
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <unistd.h>

#include <jpeglib.h>
#include <png.h>
#include <tiffio.h>
#include <webp/encode.h>

#include "exec/executor.h"
#include "lib/error.h"
#include "lib/ir.h"
#include "tests/unit/ref_test_util.h"

using namespace onnxtool;
using namespace onnxtool::testutil;

namespace {

using Bytes = std::vector<uint8_t>;

Tensor byteTensor(const Bytes& b, std::vector<int64_t> dims = {}) {
  if (dims.empty()) dims = {static_cast<int64_t>(b.size())};
  return tensorOf(DType::UInt8, std::move(dims), b);
}

/// Runs ImageDecoder-20 on `input` and returns its output tensor.
Tensor decodeTensor(Tensor input, const std::string& pixelFormat = "RGB") {
  Model m;
  m.irVersion = 9;
  m.opsetImports.push_back({"", 20, ""});
  m.graph = std::make_unique<Graph>();
  Graph* g = m.graph.get();
  Value* in = g->createValue("data");
  g->addInput(in);
  Node* n = g->addNode("ImageDecoder", {in}, {"image"});
  n->setAttr(Attribute::ofString("pixel_format", pixelFormat));
  g->addOutput(n->output(0));
  auto out = makeExecutor("ref")->prepare(m, {})->run({{"data", RtValue::ofTensor(std::move(input))}});
  REQUIRE(out.at(0).isTensor());
  REQUIRE(out[0].tensor->dtype() == DType::UInt8);
  return Tensor(*out[0].tensor);
}

/// Decoded pixels (HWC) of `encoded`; `dims` receives the output shape.
Bytes decode(const Bytes& encoded, const std::string& pixelFormat, std::vector<int64_t>* dims = nullptr) {
  Tensor t = decodeTensor(byteTensor(encoded), pixelFormat);
  if (dims) *dims = t.dims;
  return Bytes(t.raw.data(), t.raw.data() + t.raw.size());
}

/// The error message of decoding `encoded`, checking it is one line and that no library printed
/// anything on stderr meanwhile.
std::string decodeError(const Bytes& encoded, const std::string& pixelFormat = "RGB", std::vector<int64_t> dims = {}) {
  std::fflush(stderr);
  char path[] = "/tmp/onnxtool_image_decoder_stderr_XXXXXX";
  int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  int saved = dup(2);
  dup2(fd, 2);
  std::string message;
  try {
    decodeTensor(byteTensor(encoded, dims), pixelFormat);
  } catch (const Error& e) {
    message = e.what();
  }
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  off_t printed = lseek(fd, 0, SEEK_END);
  close(fd);
  std::remove(path);
  CHECK(printed == 0);
  CHECK(message.find('\n') == std::string::npos);
  return message;
}

Bytes bytes(const std::string& s) { return Bytes(s.begin(), s.end()); }

// Pillow's luma of pure red, green and blue.
constexpr uint8_t kRedL = 76, kGreenL = 150, kBlueL = 29;

// A 3x2 RGB test picture: red, green, blue / white, black, gray.
const Bytes kRgb = {255, 0, 0, 0, 255, 0, 0, 0, 255, 255, 255, 255, 0, 0, 0, 128, 128, 128};
const Bytes kBgr = {0, 0, 255, 0, 255, 0, 255, 0, 0, 255, 255, 255, 0, 0, 0, 128, 128, 128};
const Bytes kLuma = {kRedL, kGreenL, kBlueL, 255, 0, 128};

// ---- encoders ----

void pngWrite(png_structp png, png_bytep data, png_size_t n) {
  auto* out = static_cast<Bytes*>(png_get_io_ptr(png));
  out->insert(out->end(), data, data + n);
}
void pngFlush(png_structp) {}

/// A PNG of `rows` (each width * channels * bitDepth/8 bytes, already packed for the colour type).
Bytes encodePng(uint32_t width, const std::vector<Bytes>& rows, int colorType, int bitDepth, bool interlace = false,
                const std::vector<png_color>& palette = {}, const Bytes& trns = {}) {
  Bytes out;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  png_set_write_fn(png, &out, pngWrite, pngFlush);
  png_set_IHDR(png, info, width, static_cast<uint32_t>(rows.size()), bitDepth, colorType,
               interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  if (!palette.empty()) png_set_PLTE(png, info, palette.data(), static_cast<int>(palette.size()));
  if (!trns.empty()) png_set_tRNS(png, info, trns.data(), static_cast<int>(trns.size()), nullptr);
  png_write_info(png, info);
  std::vector<png_bytep> ptrs;
  for (auto& r : rows) ptrs.push_back(const_cast<png_bytep>(r.data()));
  png_write_image(png, ptrs.data());
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

Bytes encodeJpeg(int width, int height, int components, const Bytes& pixels, int quality) {
  jpeg_compress_struct cinfo;
  jpeg_error_mgr err;
  cinfo.err = jpeg_std_error(&err);
  jpeg_create_compress(&cinfo);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &buf, &size);
  cinfo.image_width = width;
  cinfo.image_height = height;
  cinfo.input_components = components;
  cinfo.in_color_space = components == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, quality, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(pixels.data() + cinfo.next_scanline * width * components);
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  Bytes out(buf, buf + size);
  free(buf);
  return out;
}

/// A one-strip TIFF written by libtiff to a temporary file, returned as bytes.
Bytes encodeTiff(uint32_t width, uint32_t height, uint16_t samples, uint16_t photometric, uint16_t compression,
                 const Bytes& pixels) {
  auto path = std::filesystem::temp_directory_path() / ("onnxtool_image_decoder_" + std::to_string(getpid()) + ".tif");
  TIFF* tif = TIFFOpen(path.c_str(), "w");
  REQUIRE(tif);
  TIFFSetField(tif, TIFFTAG_IMAGEWIDTH, width);
  TIFFSetField(tif, TIFFTAG_IMAGELENGTH, height);
  TIFFSetField(tif, TIFFTAG_SAMPLESPERPIXEL, samples);
  TIFFSetField(tif, TIFFTAG_BITSPERSAMPLE, 8);
  TIFFSetField(tif, TIFFTAG_PHOTOMETRIC, photometric);
  TIFFSetField(tif, TIFFTAG_COMPRESSION, compression);
  TIFFSetField(tif, TIFFTAG_PLANARCONFIG, PLANARCONFIG_CONTIG);
  TIFFSetField(tif, TIFFTAG_ROWSPERSTRIP, height);
  for (uint32_t y = 0; y < height; ++y)
    REQUIRE(TIFFWriteScanline(tif, const_cast<uint8_t*>(pixels.data() + y * width * samples), y, 0) == 1);
  TIFFClose(tif);
  std::ifstream f(path, std::ios::binary);
  Bytes out((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::filesystem::remove(path);
  return out;
}

void putLe(Bytes& b, uint32_t v, int n) {
  for (int i = 0; i < n; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

/// A BMP with a 40-byte header: `pixelRows` are stored as given (bottom-up unless height < 0).
Bytes encodeBmp(int32_t width, int32_t height, uint16_t bpp, uint32_t compression, const Bytes& extra,
                const std::vector<Bytes>& pixelRows, uint32_t colorsUsed = 0) {
  Bytes body;
  for (auto row : pixelRows) {
    while (row.size() % 4) row.push_back(0);
    body.insert(body.end(), row.begin(), row.end());
  }
  Bytes b = {'B', 'M'};
  uint32_t offset = 14 + 40 + static_cast<uint32_t>(extra.size());
  putLe(b, offset + static_cast<uint32_t>(body.size()), 4);
  putLe(b, 0, 4);
  putLe(b, offset, 4);
  putLe(b, 40, 4);
  putLe(b, static_cast<uint32_t>(width), 4);
  putLe(b, static_cast<uint32_t>(height), 4);
  putLe(b, 1, 2);
  putLe(b, bpp, 2);
  putLe(b, compression, 4);
  for (int i = 0; i < 3; ++i) putLe(b, 0, 4);  // image size, resolution
  putLe(b, colorsUsed, 4);
  putLe(b, 0, 4);
  b.insert(b.end(), extra.begin(), extra.end());
  b.insert(b.end(), body.begin(), body.end());
  return b;
}

}  // namespace

TEST_CASE("ImageDecoder reads PNM: P6 in every pixel format, plain and raw gray and bitmaps, maxval scaling", "[ref]") {
  Bytes p6 = bytes("P6\n# a comment\n3 2\n255\n");
  p6.insert(p6.end(), kRgb.begin(), kRgb.end());
  std::vector<int64_t> dims;
  CHECK(decode(p6, "RGB", &dims) == kRgb);
  CHECK(dims == std::vector<int64_t>{2, 3, 3});
  CHECK(decode(p6, "BGR") == kBgr);
  CHECK(decode(p6, "Grayscale", &dims) == kLuma);
  CHECK(dims == std::vector<int64_t>{2, 3, 1});

  // Plain RGB with comments between samples; maxval 15 scales to 0..255.
  CHECK(decode(bytes("P3 1 2 15\n15 0 0 # red\n 0 0 15\n"), "RGB") == Bytes{255, 0, 0, 0, 0, 255});
  // A gray source: RGB replicates it, Grayscale keeps it.
  Bytes p5 = bytes("P5 2 1 255 ");
  p5.insert(p5.end(), {7, 200});
  CHECK(decode(p5, "RGB") == Bytes{7, 7, 7, 200, 200, 200});
  CHECK(decode(p5, "Grayscale") == Bytes{7, 200});
  // 16-bit samples, big-endian.
  CHECK(decode(Bytes{'P', '5', ' ', '1', ' ', '1', ' ', '6', '5', '5', '3', '5', ' ', 0xFF, 0xFF}, "Grayscale") ==
        Bytes{255});
  // Bitmaps: 1 is black; P4 pads rows to bytes.
  CHECK(decode(bytes("P1 3 1\n101"), "Grayscale") == Bytes{0, 255, 0});
  CHECK(decode(Bytes{'P', '4', ' ', '3', ' ', '2', '\n', 0b10100000, 0b01000000}, "Grayscale") ==
        Bytes{0, 255, 0, 255, 0, 255});
}

TEST_CASE("ImageDecoder reads PNG: RGB, alpha dropped, palettes, sub-byte gray, 16 bits, interlacing", "[ref]") {
  std::vector<Bytes> rgbRows = {Bytes(kRgb.begin(), kRgb.begin() + 9), Bytes(kRgb.begin() + 9, kRgb.end())};
  Bytes png = encodePng(3, rgbRows, PNG_COLOR_TYPE_RGB, 8);
  std::vector<int64_t> dims;
  CHECK(decode(png, "RGB", &dims) == kRgb);
  CHECK(dims == std::vector<int64_t>{2, 3, 3});
  CHECK(decode(png, "BGR") == kBgr);
  CHECK(decode(png, "Grayscale") == kLuma);
  CHECK(decode(encodePng(3, rgbRows, PNG_COLOR_TYPE_RGB, 8, true), "RGB") == kRgb);

  // RGBA: the alpha channel is dropped, colour kept unpremultiplied.
  CHECK(decode(encodePng(2, {{10, 20, 30, 0, 40, 50, 60, 255}}, PNG_COLOR_TYPE_RGBA, 8), "RGB") ==
        Bytes{10, 20, 30, 40, 50, 60});
  // Palette with transparency: colours from the palette, alpha dropped.
  std::vector<png_color> palette = {{1, 2, 3}, {200, 100, 50}};
  CHECK(decode(encodePng(3, {{1, 0, 1}}, PNG_COLOR_TYPE_PALETTE, 8, false, palette, {0, 128}), "RGB") ==
        Bytes{200, 100, 50, 1, 2, 3, 200, 100, 50});
  // 1-bit gray expands to 0/255 and stays one channel.
  CHECK(decode(encodePng(4, {{0b10010000}}, PNG_COLOR_TYPE_GRAY, 1), "Grayscale", &dims) == Bytes{255, 0, 0, 255});
  CHECK(dims == std::vector<int64_t>{1, 4, 1});
  // Gray + alpha, and 16-bit RGB cut to the high byte.
  CHECK(decode(encodePng(1, {{90, 3}}, PNG_COLOR_TYPE_GRAY_ALPHA, 8), "RGB") == Bytes{90, 90, 90});
  CHECK(decode(encodePng(1, {{0x12, 0xFF, 0x34, 0x00, 0xAB, 0x80}}, PNG_COLOR_TYPE_RGB, 16), "RGB") ==
        Bytes{0x12, 0x34, 0xAB});
}

TEST_CASE("ImageDecoder reads JPEG: colour within coding error, gray as one channel, BGR mirrors RGB", "[ref]") {
  Bytes flat;
  for (int i = 0; i < 16 * 16; ++i) flat.insert(flat.end(), {200, 40, 90});
  Bytes jpeg = encodeJpeg(16, 16, 3, flat, 100);
  std::vector<int64_t> dims;
  Bytes rgb = decode(jpeg, "RGB", &dims);
  CHECK(dims == std::vector<int64_t>{16, 16, 3});
  for (size_t i = 0; i < rgb.size(); ++i) CHECK(std::abs(int(rgb[i]) - int(flat[i])) <= 3);
  Bytes bgr = decode(jpeg, "BGR");
  for (size_t i = 0; i < rgb.size(); i += 3) CHECK((bgr[i] == rgb[i + 2] && bgr[i + 1] == rgb[i + 1] && bgr[i + 2] == rgb[i]));
  // Grayscale from a colour JPEG is Pillow's luma of the decoded RGB, not the stored Y.
  Bytes gray = decode(jpeg, "Grayscale", &dims);
  CHECK(dims == std::vector<int64_t>{16, 16, 1});
  CHECK(gray[0] == ((rgb[0] * 19595 + rgb[1] * 38470 + rgb[2] * 7471 + 0x8000) >> 16));

  Bytes ramp;
  for (int i = 0; i < 8 * 8; ++i) ramp.push_back(static_cast<uint8_t>(i * 4));
  Bytes grayJpeg = encodeJpeg(8, 8, 1, ramp, 100);
  Bytes g = decode(grayJpeg, "Grayscale", &dims);
  CHECK(dims == std::vector<int64_t>{8, 8, 1});
  for (size_t i = 0; i < g.size(); ++i) CHECK(std::abs(int(g[i]) - int(ramp[i])) <= 2);
  Bytes g3 = decode(grayJpeg, "RGB");
  for (size_t i = 0; i < g.size(); ++i) CHECK((g3[i * 3] == g[i] && g3[i * 3 + 1] == g[i] && g3[i * 3 + 2] == g[i]));
}

TEST_CASE("ImageDecoder reads TIFF (uncompressed, LZW, gray) and lossless WebP exactly", "[ref]") {
  CHECK(decode(encodeTiff(3, 2, 3, PHOTOMETRIC_RGB, COMPRESSION_NONE, kRgb), "RGB") == kRgb);
  CHECK(decode(encodeTiff(3, 2, 3, PHOTOMETRIC_RGB, COMPRESSION_LZW, kRgb), "BGR") == kBgr);
  std::vector<int64_t> dims;
  CHECK(decode(encodeTiff(2, 1, 1, PHOTOMETRIC_MINISBLACK, COMPRESSION_NONE, {9, 250}), "Grayscale", &dims) ==
        Bytes{9, 250});
  CHECK(dims == std::vector<int64_t>{1, 2, 1});

  uint8_t* out = nullptr;
  size_t n = WebPEncodeLosslessRGB(kRgb.data(), 3, 2, 9, &out);
  REQUIRE(n > 0);
  Bytes webp(out, out + n);
  WebPFree(out);
  CHECK(decode(webp, "RGB", &dims) == kRgb);
  CHECK(dims == std::vector<int64_t>{2, 3, 3});
  CHECK(decode(webp, "Grayscale") == kLuma);
  Bytes rgba = {1, 2, 3, 1, 4, 5, 6, 255};  // alpha 0 would let the encoder drop the colour
  n = WebPEncodeLosslessRGBA(rgba.data(), 2, 1, 8, &out);
  REQUIRE(n > 0);
  Bytes webpAlpha(out, out + n);
  WebPFree(out);
  CHECK(decode(webpAlpha, "RGB") == Bytes{1, 2, 3, 4, 5, 6});
}

TEST_CASE("ImageDecoder reads BMP: 24-bit bottom-up, 8-bit palette top-down, 32-bit bit fields", "[ref]") {
  // Rows are stored bottom-up: the second stored row is the top of the image.
  Bytes bmp24 = encodeBmp(3, 2, 24, 0, {}, {{255, 255, 255, 0, 0, 0, 128, 128, 128}, {0, 0, 255, 0, 255, 0, 255, 0, 0}});
  CHECK(decode(bmp24, "RGB") == kRgb);
  Bytes palette = {0, 0, 0, 0, 30, 20, 10, 0};  // BGRX entries
  Bytes bmp8 = encodeBmp(2, -2, 8, 0, palette, {{1, 0}, {0, 1}}, 2);
  CHECK(decode(bmp8, "RGB") == Bytes{10, 20, 30, 0, 0, 0, 0, 0, 0, 10, 20, 30});
  Bytes masks = {0, 0, 0, 0xFF, 0, 0, 0xFF, 0, 0, 0xFF, 0, 0};  // R in the top byte, G, B below
  Bytes bmp32 = encodeBmp(1, 1, 32, 3, masks, {{0, 0x33, 0x22, 0x11}});
  CHECK(decode(bmp32, "RGB") == Bytes{0x11, 0x22, 0x33});
}

TEST_CASE("ImageDecoder fails with one-line errors on corrupt, truncated or unsupported input", "[ref]") {
  CHECK_THAT(decodeError(bytes("hello, world")), Catch::Contains("unrecognised image format"));
  CHECK_THAT(decodeError({}), Catch::Contains("empty"));
  CHECK_THAT(decodeError(bytes("P6 4 4 255\nxx")), Catch::Contains("PNM"));
  CHECK_THAT(decodeError(bytes("P6 3 2 255\n")), Catch::Contains("end of data"));

  std::vector<Bytes> rows = {Bytes(kRgb.begin(), kRgb.begin() + 9), Bytes(kRgb.begin() + 9, kRgb.end())};
  Bytes png = encodePng(3, rows, PNG_COLOR_TYPE_RGB, 8);
  CHECK_THAT(decodeError(Bytes(png.begin(), png.begin() + 40)), Catch::Contains("PNG"));
  Bytes badCrc = png;
  badCrc[29] ^= 0xFF;  // IHDR's CRC
  CHECK_THAT(decodeError(badCrc), Catch::Contains("PNG"));

  Bytes flat(32 * 32 * 3, 77);
  for (size_t i = 0; i < flat.size(); ++i) flat[i] = static_cast<uint8_t>(i * 7);
  Bytes jpeg = encodeJpeg(32, 32, 3, flat, 90);
  CHECK_THAT(decodeError(Bytes(jpeg.begin(), jpeg.begin() + jpeg.size() / 2)), Catch::Contains("JPEG"));
  CHECK_THAT(decodeError(Bytes(jpeg.begin(), jpeg.begin() + 30)), Catch::Contains("JPEG"));

  Bytes tiff = encodeTiff(3, 2, 3, PHOTOMETRIC_RGB, COMPRESSION_NONE, kRgb);
  CHECK_THAT(decodeError(Bytes(tiff.begin(), tiff.begin() + 12)), Catch::Contains("TIFF"));
  Bytes webp = {'R', 'I', 'F', 'F', 16, 0, 0, 0, 'W', 'E', 'B', 'P', 'V', 'P', '8', ' ', 4, 0, 0, 0, 1, 2, 3, 4};
  CHECK_THAT(decodeError(webp), Catch::Contains("WebP"));
  CHECK_THAT(decodeError(Bytes{0xFF, 0x4F, 0xFF, 0x51, 0, 0x29, 0, 0}), Catch::Contains("JPEG 2000"));
  CHECK_THAT(decodeError(Bytes{0, 0, 0, 12, 'j', 'P', ' ', ' ', '\r', '\n', 0x87, '\n', 0, 0}), Catch::Contains("JPEG 2000"));
  CHECK_THAT(decodeError(encodeBmp(2, 2, 8, 1, {}, {{0, 0}, {0, 0}})), Catch::Contains("compression"));

  Bytes p6 = bytes("P6 1 1 255 ");
  p6.insert(p6.end(), {1, 2, 3});
  CHECK_THAT(decodeError(p6, "HSV"), Catch::Contains("pixel_format"));
  CHECK_THAT(decodeError(p6, "RGB", {1, static_cast<int64_t>(p6.size())}), Catch::Contains("1-D"));
}
