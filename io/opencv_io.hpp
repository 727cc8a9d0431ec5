// Sources and sinks backed by OpenCV (built with VFPIPE_WITH_OPENCV): cameras (V4L2),
// video files and URLs (OpenCV's FFmpeg backend), image sequences; video files and image
// sequences as outputs. OpenCV gives and takes packed BGR (or gray); the engine converts.
#pragma once
#include <memory>
#include <string>

#include "pipeline/source.hpp"

namespace vfp {

// `camera`: an index ("0") or a device path ("/dev/video0").
std::unique_ptr<Source> open_camera_source(const std::string& camera, int width, int height, double fps);
std::unique_ptr<Source> open_video_source(const std::string& path_or_url);
// printf pattern ("img_%04d.png") or glob ("frames/*.png").
std::unique_ptr<Source> open_image_sequence_source(const std::string& pattern, double fps);

std::unique_ptr<Sink> open_video_sink(const std::string& path, const std::string& fourcc);
std::unique_ptr<Sink> open_image_sequence_sink(const std::string& pattern);
// One still image (.jpg, .bmp, .tif, ...; ffmpeg's -frames:v 1 out.jpg): at most one frame.
std::unique_ptr<Sink> open_image_sink(const std::string& path);

}  // namespace vfp
